package devcluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// firstSuccessInterval is how often startup and readiness probes run until their first
// success. The kubelet waits a full period; a person watching `hookkeeper dev` start
// should not wait ten seconds for a server that listens after fifty milliseconds.
const firstSuccessInterval = 250 * time.Millisecond

// probe runs the container's startup probe, then its liveness and readiness probes,
// until ctx is done. A startup or liveness probe that gives up sends a message on
// failed, once.
func (r *podRunner) probe(ctx context.Context, c *corev1.Container, failed chan<- string) {
	if c.StartupProbe != nil {
		if msg, ok := r.waitStartup(ctx, c, c.StartupProbe); !ok {
			if ctx.Err() == nil {
				failed <- "startup probe failed: " + msg
			}
			return
		}
		r.setStarted()
		if c.ReadinessProbe == nil {
			r.setReady(true)
		}
	}
	done := make(chan struct{})
	if c.LivenessProbe != nil {
		go func() {
			defer close(done)
			r.watchProbe(ctx, c, c.LivenessProbe, true, func(ok bool, msg string) bool {
				if !ok {
					failed <- "liveness probe failed: " + msg
					return true
				}
				return false
			})
		}()
	} else {
		close(done)
	}
	if c.ReadinessProbe != nil {
		r.watchProbe(ctx, c, c.ReadinessProbe, false, func(ok bool, _ string) bool {
			r.setReady(ok)
			return false
		})
	}
	<-done
}

// waitStartup runs a startup probe until it succeeds, or until its budget (initial delay
// plus failureThreshold periods, as in the kubelet) is spent.
func (r *podRunner) waitStartup(ctx context.Context, c *corev1.Container, p *corev1.Probe) (string, bool) {
	budget := seconds(p.InitialDelaySeconds, 0) + time.Duration(max(p.FailureThreshold, 1))*seconds(p.PeriodSeconds, 10)
	deadline := time.Now().Add(budget)
	if !wait(ctx, seconds(p.InitialDelaySeconds, 0)) {
		return ctx.Err().Error(), false
	}
	for {
		ok, msg := r.probeOnce(ctx, c, p, seconds(p.TimeoutSeconds, 1))
		if ok {
			return "", true
		}
		if time.Now().After(deadline) {
			return msg, false
		}
		if !wait(ctx, firstSuccessInterval) {
			return ctx.Err().Error(), false
		}
	}
}

// watchProbe runs p on its schedule and calls onChange whenever the success and failure
// thresholds flip its result (starting from initial); it returns when ctx is done or
// onChange returns true. A probe starting from false runs every firstSuccessInterval
// until its first success.
func (r *podRunner) watchProbe(ctx context.Context, c *corev1.Container, p *corev1.Probe, initial bool, onChange func(ok bool, msg string) bool) {
	period := seconds(p.PeriodSeconds, 10)
	timeout := seconds(p.TimeoutSeconds, 1)
	successThreshold := max(p.SuccessThreshold, 1)
	failureThreshold := max(p.FailureThreshold, 1)
	if !wait(ctx, seconds(p.InitialDelaySeconds, 0)) {
		return
	}
	result := initial
	everSucceeded := false
	var successes, failures int32
	for {
		ok, msg := r.probeOnce(ctx, c, p, timeout)
		if ctx.Err() != nil {
			return
		}
		if ok {
			successes, failures = successes+1, 0
			everSucceeded = true
		} else {
			successes, failures = 0, failures+1
		}
		if ok && !result && successes >= successThreshold {
			result = true
			if onChange(true, "") {
				return
			}
		}
		if !ok && result && failures >= failureThreshold {
			result = false
			if onChange(false, msg) {
				return
			}
		}
		next := period
		if !initial && !everSucceeded {
			next = firstSuccessInterval
		}
		if !wait(ctx, next) {
			return
		}
	}
}

func seconds(v int32, def int32) time.Duration {
	if v <= 0 {
		v = def
	}
	return time.Duration(v) * time.Second
}

func wait(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// probeOnce runs one probe attempt; exec and gRPC probes are not supported by the dev
// node (the process has no image to exec in) and count as successes, logged once.
func (r *podRunner) probeOnce(ctx context.Context, c *corev1.Container, p *corev1.Probe, timeout time.Duration) (bool, string) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch {
	case p.HTTPGet != nil:
		return r.probeHTTP(ctx, c, p.HTTPGet)
	case p.TCPSocket != nil:
		host := p.TCPSocket.Host
		if host == "" {
			host = r.ip.String()
		}
		port, err := containerPort(c, p.TCPSocket.Port)
		if err != nil {
			return false, err.Error()
		}
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return false, err.Error()
		}
		_ = conn.Close()
		return true, ""
	default:
		r.unsupportedProbeOnce.Do(func() {
			r.log.Info("exec and gRPC probes are not run by the dev node agent; they count as passing", "container", c.Name)
		})
		return true, ""
	}
}

func (r *podRunner) probeHTTP(ctx context.Context, c *corev1.Container, g *corev1.HTTPGetAction) (bool, string) {
	host := g.Host
	if host == "" {
		host = r.ip.String()
	}
	port, err := containerPort(c, g.Port)
	if err != nil {
		return false, err.Error()
	}
	scheme := strings.ToLower(string(g.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	path := g.Path
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	u := url.URL{Scheme: scheme, Host: net.JoinHostPort(host, strconv.Itoa(port))}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String()+path, nil)
	if err != nil {
		return false, fmt.Sprintf("build probe request: %v", err)
	}
	req.Header.Set("User-Agent", "kube-probe/1.37")
	for _, h := range g.HTTPHeaders {
		req.Header.Add(h.Name, h.Value)
	}
	resp, err := probeClient.Do(req)
	if err != nil {
		return false, err.Error()
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 10<<10))
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return false, "HTTP probe failed with statuscode: " + strconv.Itoa(resp.StatusCode)
	}
	return true, ""
}

// probeClient matches the kubelet: HTTPS probes do not verify certificates, and
// keep-alives are off so each attempt tests a fresh connection.
var probeClient = &http.Client{Transport: &http.Transport{
	TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the kubelet does not verify probe targets either
	DisableKeepAlives: true,
}}

// containerPort resolves a probe's port, which may name one of the container's ports.
func containerPort(c *corev1.Container, port intstr.IntOrString) (int, error) {
	if port.Type == intstr.Int {
		return port.IntValue(), nil
	}
	for _, p := range c.Ports {
		if p.Name == port.StrVal {
			return int(p.ContainerPort), nil
		}
	}
	if n, err := strconv.Atoi(port.StrVal); err == nil {
		return n, nil
	}
	return 0, fmt.Errorf("container %s has no port named %q", c.Name, port.StrVal)
}
