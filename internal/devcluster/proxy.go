package devcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// ServiceProxyOptions configures a ServiceProxy.
type ServiceProxyOptions struct {
	Config *rest.Config
	// Out receives one line per Service port opened or closed. Defaults to io.Discard.
	Out io.Writer
	Log logr.Logger
}

// ServiceProxy makes Services reachable from the host without kube-proxy: every TCP port
// of every Service (but ExternalName) gets a listener on 127.0.0.1:<free port> that
// forwards connections to the Service's ready endpoints, round robin.
//
// Endpoints of a Service with a selector are computed from its Pods, as the EndpointSlice
// controller would: the API server rejects loopback addresses in EndpointSlices and
// Endpoints, so Pods on the dev node (127.0.0.N) can never appear there. Services without
// a selector use their hand-made EndpointSlices.
type ServiceProxy struct {
	opts   ServiceProxyOptions
	client kubernetes.Interface

	services corelisters.ServiceLister
	pods     corelisters.PodLister
	slices   discoverylisters.EndpointSliceLister

	mu        sync.Mutex
	listeners map[servicePortKey]*portForwarder
	changed   chan struct{} // closed and replaced whenever listeners change

	ready chan struct{}
}

type servicePortKey struct {
	namespace, name, port string // port is the port's name, or its number when unnamed
}

type portForwarder struct {
	key      servicePortKey
	number   int32
	listener net.Listener
	next     atomic.Uint64
	conns    sync.WaitGroup
}

// NewServiceProxy builds a proxy; Run starts it.
func NewServiceProxy(opts ServiceProxyOptions) (*ServiceProxy, error) {
	if opts.Config == nil {
		return nil, errors.New("service proxy: no REST config")
	}
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	if opts.Log.GetSink() == nil {
		opts.Log = logr.Discard()
	}
	client, err := kubernetes.NewForConfig(opts.Config)
	if err != nil {
		return nil, fmt.Errorf("build service proxy client: %w", err)
	}
	return &ServiceProxy{
		opts:      opts,
		client:    client,
		listeners: map[servicePortKey]*portForwarder{},
		changed:   make(chan struct{}),
		ready:     make(chan struct{}),
	}, nil
}

// Ready is closed once the proxy's caches have synced.
func (p *ServiceProxy) Ready() <-chan struct{} { return p.ready }

// Run serves until ctx is done, then closes every listener.
func (p *ServiceProxy) Run(ctx context.Context) error {
	factory := informers.NewSharedInformerFactory(p.client, 0)
	services := factory.Core().V1().Services()
	pods := factory.Core().V1().Pods()
	endpointSlices := factory.Discovery().V1().EndpointSlices()
	p.services = services.Lister()
	p.pods = pods.Lister()
	p.slices = endpointSlices.Lister()
	// Services are reconciled one at a time, in event order, by the informer's handler.
	if _, err := services.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { p.syncService(obj, false) },
		UpdateFunc: func(_, obj any) { p.syncService(obj, false) },
		DeleteFunc: func(obj any) { p.syncService(obj, true) },
	}); err != nil {
		return fmt.Errorf("watch services: %w", err)
	}
	stopInformers, err := startInformers(ctx, factory, services.Informer().HasSynced, pods.Informer().HasSynced, endpointSlices.Informer().HasSynced)
	if err != nil {
		return fmt.Errorf("sync service proxy caches: %w", err)
	}
	defer stopInformers()
	close(p.ready)
	<-ctx.Done()

	p.mu.Lock()
	forwarders := make([]*portForwarder, 0, len(p.listeners))
	for k, f := range p.listeners {
		forwarders = append(forwarders, f)
		delete(p.listeners, k)
	}
	p.mu.Unlock()
	for _, f := range forwarders {
		_ = f.listener.Close()
		f.conns.Wait()
	}
	return nil
}

func (p *ServiceProxy) syncService(obj any, deleted bool) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return
	}
	want := map[servicePortKey]int32{}
	if !deleted && svc.Spec.Type != corev1.ServiceTypeExternalName {
		for _, sp := range svc.Spec.Ports {
			if sp.Protocol != "" && sp.Protocol != corev1.ProtocolTCP {
				continue
			}
			want[portKey(svc.Namespace, svc.Name, sp)] = sp.Port
		}
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	changed := false
	for key, f := range p.listeners {
		if key.namespace != svc.Namespace || key.name != svc.Name {
			continue
		}
		if number, keep := want[key]; keep {
			f.number = number
			continue
		}
		_ = f.listener.Close()
		delete(p.listeners, key)
		changed = true
		fmt.Fprintf(p.opts.Out, "service %s/%s port %s closed\n", key.namespace, key.name, key.port)
	}
	for key, number := range want {
		if _, open := p.listeners[key]; open {
			continue
		}
		var lc net.ListenConfig
		l, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
		if err != nil {
			p.opts.Log.Error(err, "open service listener", "service", key.namespace+"/"+key.name, "port", key.port)
			continue
		}
		f := &portForwarder{key: key, number: number, listener: l}
		p.listeners[key] = f
		changed = true
		go p.serve(f)
		fmt.Fprintf(p.opts.Out, "service %s/%s port %s -> %s\n", key.namespace, key.name, key.port, l.Addr())
	}
	if changed {
		close(p.changed)
		p.changed = make(chan struct{})
	}
}

func portKey(namespace, name string, sp corev1.ServicePort) servicePortKey {
	port := sp.Name
	if port == "" {
		port = strconv.Itoa(int(sp.Port))
	}
	return servicePortKey{namespace: namespace, name: name, port: port}
}

// Addr returns the local address (host:port) that forwards to the Service's port, given
// by name or number. It fails when the proxy has no listener for it.
func (p *ServiceProxy) Addr(namespace, name, port string) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if f, ok := p.listeners[servicePortKey{namespace, name, port}]; ok {
		return f.listener.Addr().String(), nil
	}
	for key, f := range p.listeners {
		if key.namespace == namespace && key.name == name && strconv.Itoa(int(f.number)) == port {
			return f.listener.Addr().String(), nil
		}
	}
	return "", fmt.Errorf("no local listener for service %s/%s port %s", namespace, name, port)
}

// URL returns http://<Addr> for the Service's port.
func (p *ServiceProxy) URL(namespace, name, port string) (string, error) {
	addr, err := p.Addr(namespace, name, port)
	if err != nil {
		return "", err
	}
	return "http://" + addr, nil
}

// WaitAddr waits until the Service's port has a listener, or ctx is done.
func (p *ServiceProxy) WaitAddr(ctx context.Context, namespace, name, port string) (string, error) {
	for {
		p.mu.Lock()
		changed := p.changed
		p.mu.Unlock()
		addr, err := p.Addr(namespace, name, port)
		if err == nil {
			return addr, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("wait for service %s/%s port %s: %w", namespace, name, port, ctx.Err())
		case <-changed:
		}
	}
}

func (p *ServiceProxy) serve(f *portForwarder) {
	for {
		conn, err := f.listener.Accept()
		if err != nil {
			return // closed
		}
		f.conns.Add(1)
		go func() {
			defer f.conns.Done()
			p.forward(f, conn)
		}()
	}
}

func (p *ServiceProxy) forward(f *portForwarder, client net.Conn) {
	defer func() { _ = client.Close() }()
	targets := p.readyEndpoints(f.key)
	if len(targets) == 0 {
		p.opts.Log.V(1).Info("no ready endpoint", "service", f.key.namespace+"/"+f.key.name, "port", f.key.port)
		return
	}
	start := f.next.Add(1)
	var upstream net.Conn
	var err error
	// Try each ready endpoint once, starting at the round-robin position, so that a Pod
	// that just stopped listening does not fail the connection.
	for i := range targets {
		target := targets[(int(start)+i)%len(targets)]
		dialer := net.Dialer{Timeout: 2 * time.Second}
		upstream, err = dialer.DialContext(context.Background(), "tcp", target)
		if err == nil {
			break
		}
	}
	if err != nil {
		p.opts.Log.V(1).Info("dial endpoints failed", "service", f.key.namespace+"/"+f.key.name, "error", err.Error())
		return
	}
	defer func() { _ = upstream.Close() }()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(upstream, client)
	go pipe(client, upstream)
	<-done
	<-done
}

// readyEndpoints lists ip:port of the ready endpoints for a Service port, sorted so
// that round robin walks them in a stable order.
func (p *ServiceProxy) readyEndpoints(key servicePortKey) []string {
	svc, err := p.services.Services(key.namespace).Get(key.name)
	if err != nil {
		return nil
	}
	var sp *corev1.ServicePort
	for i := range svc.Spec.Ports {
		if portKey(svc.Namespace, svc.Name, svc.Spec.Ports[i]) == key {
			sp = &svc.Spec.Ports[i]
		}
	}
	if sp == nil {
		return nil
	}
	var out []string
	if len(svc.Spec.Selector) > 0 {
		out = p.podEndpoints(svc, sp)
	} else {
		out = p.sliceEndpoints(key)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// podEndpoints selects the Service's Pods that have an IP, are not terminating and are
// Ready (or the Service publishes not-ready addresses), and resolves the target port
// against each Pod's containers.
func (p *ServiceProxy) podEndpoints(svc *corev1.Service, sp *corev1.ServicePort) []string {
	pods, err := p.pods.Pods(svc.Namespace).List(labels.SelectorFromSet(svc.Spec.Selector))
	if err != nil {
		return nil
	}
	var out []string
	for _, pod := range pods {
		if pod.Status.PodIP == "" || pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning {
			continue
		}
		if !svc.Spec.PublishNotReadyAddresses && !PodReady(pod) {
			continue
		}
		port, ok := ServiceTargetPort(pod, sp)
		if !ok {
			continue
		}
		out = append(out, net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(int(port))))
	}
	return out
}

// PodReady reports whether pod's Ready condition is True: whether a Service sends it
// traffic.
func PodReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// ServiceTargetPort is the container port of pod that the Service port sp targets, as
// kube-proxy resolves it: a named targetPort by the TCP container port of that name
// (false when pod has none), a numbered one as it is, none as sp's own port.
func ServiceTargetPort(pod *corev1.Pod, sp *corev1.ServicePort) (int32, bool) {
	switch {
	case sp.TargetPort.Type == intstr.String && sp.TargetPort.StrVal != "":
		for _, c := range pod.Spec.Containers {
			for _, cp := range c.Ports {
				if cp.Name == sp.TargetPort.StrVal && (cp.Protocol == "" || cp.Protocol == corev1.ProtocolTCP) {
					return cp.ContainerPort, true
				}
			}
		}
		return 0, false
	case sp.TargetPort.Type == intstr.Int && sp.TargetPort.IntVal != 0:
		return sp.TargetPort.IntVal, true
	default:
		return sp.Port, true
	}
}

func (p *ServiceProxy) sliceEndpoints(key servicePortKey) []string {
	sel := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: key.name})
	list, err := p.slices.EndpointSlices(key.namespace).List(sel)
	if err != nil {
		return nil
	}
	// An unnamed Service port (keyed by its number: port names always contain a
	// letter) appears in a slice with an empty name.
	_, numericErr := strconv.Atoi(key.port)
	var out []string
	for _, s := range list {
		var port int32 = -1
		for _, sp := range s.Ports {
			name := ""
			if sp.Name != nil {
				name = *sp.Name
			}
			if sp.Port != nil && (name == key.port || (name == "" && numericErr == nil)) {
				port = *sp.Port
				break
			}
		}
		if port < 0 {
			continue
		}
		for _, ep := range s.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			for _, addr := range ep.Addresses {
				out = append(out, net.JoinHostPort(addr, strconv.Itoa(int(port))))
			}
		}
	}
	return out
}
