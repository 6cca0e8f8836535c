package devcluster

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/resources"
)

// ReceiverURL is the local URL of the endpoint's receiver Service (webhook port) and
// path, served by the Service proxy.
func ReceiverURL(proxy *ServiceProxy, ep *v1alpha1.WebhookEndpoint) (string, error) {
	service, path := resources.ServedBy(ep)
	base, err := proxy.URL(ep.Namespace, service, resources.PortNameHTTP)
	if err != nil {
		return "", err
	}
	return base + path, nil
}

// ReceiverLine is how hookkeeper dev prints an endpoint's local receiver address.
func ReceiverLine(namespace, name, url string) string {
	return fmt.Sprintf("receiver:   %s/%s -> POST %s", namespace, name, url)
}

// endpointAnnouncer decides what to print as WebhookEndpoints come and go: the local
// address once an endpoint is Ready (again only if the address changed), and its
// deletion. It is the testable part of WatchEndpoints.
type endpointAnnouncer struct {
	// url resolves the endpoint's local receiver URL.
	url func(*v1alpha1.WebhookEndpoint) (string, error)

	mu sync.Mutex
	// announced holds the URL printed for each endpoint.
	announced map[types.NamespacedName]string
}

func newEndpointAnnouncer(url func(*v1alpha1.WebhookEndpoint) (string, error)) *endpointAnnouncer {
	return &endpointAnnouncer{url: url, announced: map[types.NamespacedName]string{}}
}

// seen records an address already printed, so that the watch's initial list does not
// print it again.
func (a *endpointAnnouncer) seen(namespace, name, url string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.announced[types.NamespacedName{Namespace: namespace, Name: name}] = url
}

// updated returns the line to print for the endpoint's current state, or "".
func (a *endpointAnnouncer) updated(ep *v1alpha1.WebhookEndpoint) string {
	if ep.DeletionTimestamp != nil || !meta.IsStatusConditionTrue(ep.Status.Conditions, v1alpha1.ConditionReady) {
		return ""
	}
	key := types.NamespacedName{Namespace: ep.Namespace, Name: ep.Name}
	u, err := a.url(ep)
	if err != nil {
		return fmt.Sprintf("receiver:   %s/%s is Ready but has no local address: %v", ep.Namespace, ep.Name, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.announced[key] == u {
		return ""
	}
	a.announced[key] = u
	return ReceiverLine(ep.Namespace, ep.Name, u)
}

// deleted returns the line to print when the endpoint is gone.
func (a *endpointAnnouncer) deleted(namespace, name string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.announced, types.NamespacedName{Namespace: namespace, Name: name})
	return fmt.Sprintf("receiver:   %s/%s deleted", namespace, name)
}

// endpointAddrWait bounds how long a Ready endpoint's Service listener is waited for.
const endpointAddrWait = 10 * time.Second

// WatchEndpoints prints to out, until ctx is done, the local receiver address of every
// WebhookEndpoint in the cluster when it becomes Ready, and a line when one is deleted.
// printed are the endpoints whose addresses were already printed (the samples).
func (s *Session) WatchEndpoints(ctx context.Context, out io.Writer, printed []*v1alpha1.WebhookEndpoint) error {
	scheme, err := Scheme()
	if err != nil {
		return err
	}
	c, err := cache.New(s.Cluster.Config(), cache.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("build endpoint cache: %w", err)
	}
	a := newEndpointAnnouncer(func(ep *v1alpha1.WebhookEndpoint) (string, error) {
		// The operator creates the Service before the receivers turn Ready, but the proxy
		// opens its listener from its own watch: wait a little for it.
		waitCtx, cancel := context.WithTimeout(ctx, endpointAddrWait)
		defer cancel()
		service, _ := resources.ServedBy(ep)
		if _, err := s.Proxy.WaitAddr(waitCtx, ep.Namespace, service, resources.PortNameHTTP); err != nil {
			return "", err
		}
		return ReceiverURL(s.Proxy, ep)
	})
	for _, ep := range printed {
		if u, err := ReceiverURL(s.Proxy, ep); err == nil {
			a.seen(ep.Namespace, ep.Name, u)
		}
	}
	inf, err := c.GetInformer(ctx, &v1alpha1.WebhookEndpoint{})
	if err != nil {
		return fmt.Errorf("watch WebhookEndpoints: %w", err)
	}
	show := func(line string) {
		if line != "" {
			fmt.Fprintln(out, line)
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if ep, ok := obj.(*v1alpha1.WebhookEndpoint); ok {
				show(a.updated(ep))
			}
		},
		UpdateFunc: func(_, obj any) {
			if ep, ok := obj.(*v1alpha1.WebhookEndpoint); ok {
				show(a.updated(ep))
			}
		},
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if m, ok := obj.(metav1.Object); ok {
				show(a.deleted(m.GetNamespace(), m.GetName()))
			}
		},
	}); err != nil {
		return fmt.Errorf("watch WebhookEndpoints: %w", err)
	}
	if err := c.Start(ctx); err != nil {
		return fmt.Errorf("watch WebhookEndpoints: %w", err)
	}
	return nil
}
