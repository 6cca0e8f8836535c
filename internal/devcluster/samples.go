package devcluster

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/demo"
	"github.com/hookkeeper/hookkeeper/internal/resources"
)

// SampleOptions configures ApplySamples.
type SampleOptions struct {
	Config   *rest.Config
	RepoRoot string
	// DatabaseURL replaces the placeholder URL of the shop-db-app Secret, and is where
	// the orders table is created and seeded.
	DatabaseURL string
	// SinkURL replaces the sample's in-cluster sink, which has no Pod here.
	SinkURL string
}

// Samples are the applied sample objects.
type Samples struct {
	Client    client.Client
	Namespace string
	Endpoints []*v1alpha1.WebhookEndpoint
	// SigningSecrets holds the Stripe sample's signing secret by endpoint name, read
	// back from its Secret so that scripted webhooks sign with what the receiver has.
	SigningSecrets map[string]string
}

// Scheme returns a scheme with the core kinds and WebhookEndpoint.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("register core kinds: %w", err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("register WebhookEndpoint: %w", err)
	}
	return s, nil
}

// ApplySamples creates the shop namespace, prepares the orders table and applies the
// Stripe orders sample with its Secrets, pointing the database Secret at DatabaseURL and
// delivery at SinkURL.
func ApplySamples(ctx context.Context, opts SampleOptions) (*Samples, error) {
	scheme, err := Scheme()
	if err != nil {
		return nil, err
	}
	c, err := client.New(opts.Config, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("build client: %w", err)
	}
	if err := demo.SeedOrders(ctx, opts.DatabaseURL); err != nil {
		return nil, err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: demo.SampleNamespace}}
	if err := c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create namespace %s: %w", demo.SampleNamespace, err)
	}
	out := &Samples{Client: c, Namespace: demo.SampleNamespace, SigningSecrets: map[string]string{}}
	var objs []client.Object
	for _, rel := range demo.SampleFiles {
		docs, err := demo.ReadManifests(filepath.Join(opts.RepoRoot, rel))
		if err != nil {
			return nil, err
		}
		for _, u := range docs {
			obj, err := adaptSample(scheme, u, opts)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", rel, err)
			}
			obj.SetNamespace(demo.SampleNamespace)
			objs = append(objs, obj)
			if ep, ok := obj.(*v1alpha1.WebhookEndpoint); ok {
				out.Endpoints = append(out.Endpoints, ep)
			}
		}
	}
	for _, obj := range objs {
		if err := c.Create(ctx, obj); err != nil {
			return nil, fmt.Errorf("apply %T %s: %w", obj, obj.GetName(), err)
		}
	}
	for _, ep := range out.Endpoints {
		if len(ep.Spec.SigningSecrets) == 0 {
			continue
		}
		ref := ep.Spec.SigningSecrets[0].SecretKeyRef
		var secret corev1.Secret
		if err := c.Get(ctx, client.ObjectKey{Namespace: demo.SampleNamespace, Name: ref.Name}, &secret); err != nil {
			return nil, fmt.Errorf("read signing secret of %s: %w", ep.Name, err)
		}
		out.SigningSecrets[ep.Name] = string(secret.Data[ref.Key])
	}
	return out, nil
}

// adaptSample converts a sample document to its typed object and rewires what points
// outside the dev environment: the database URL and the delivery sink.
func adaptSample(scheme *runtime.Scheme, u *unstructured.Unstructured, opts SampleOptions) (client.Object, error) {
	typed, err := scheme.New(u.GroupVersionKind())
	if err != nil {
		return nil, fmt.Errorf("kind %s: %w", u.GroupVersionKind(), err)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, typed); err != nil {
		return nil, fmt.Errorf("convert %s %s: %w", u.GetKind(), u.GetName(), err)
	}
	obj, ok := typed.(client.Object)
	if !ok {
		return nil, fmt.Errorf("%s is not an object", u.GetKind())
	}
	demo.Rewire(obj, opts.DatabaseURL, opts.SinkURL)
	return obj, nil
}

// Describe names the applied endpoints.
func (s *Samples) Describe() string {
	names := make([]string, 0, len(s.Endpoints))
	for _, ep := range s.Endpoints {
		names = append(names, s.Namespace+"/"+ep.Name)
	}
	return "WebhookEndpoint " + strings.Join(names, ", ")
}

// WaitReceivers waits until every sample endpoint's receiver Deployment has all its
// replicas ready and its Service is proxied, or failed is closed, or ctx is done.
func (s *Samples) WaitReceivers(ctx context.Context, proxy *ServiceProxy, failed <-chan struct{}) error {
	for _, ep := range s.Endpoints {
		name, _ := resources.ServedBy(ep) // the Deployment is named as its Service
		last := ""
		for {
			var d appsv1.Deployment
			err := s.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: name}, &d)
			switch {
			case err == nil && d.Spec.Replicas != nil && d.Status.ReadyReplicas >= *d.Spec.Replicas && d.Status.ObservedGeneration >= d.Generation:
				last = ""
			case err == nil:
				last = fmt.Sprintf("deployment %s: %d/%d ready", name, d.Status.ReadyReplicas, ptrValue(d.Spec.Replicas))
			case apierrors.IsNotFound(err):
				last = s.endpointStatus(ctx, ep)
			default:
				last = err.Error()
			}
			if last == "" {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%w (last: %s)", ctx.Err(), last)
			case <-failed:
				return errors.New("a component failed")
			case <-time.After(250 * time.Millisecond):
			}
		}
		if _, err := proxy.WaitAddr(ctx, s.Namespace, name, resources.PortNameHTTP); err != nil {
			return err
		}
	}
	return nil
}

func ptrValue(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}

// endpointStatus summarises the WebhookEndpoint's conditions while its Deployment does
// not exist yet.
func (s *Samples) endpointStatus(ctx context.Context, ep *v1alpha1.WebhookEndpoint) string {
	var cur v1alpha1.WebhookEndpoint
	if err := s.Client.Get(ctx, client.ObjectKeyFromObject(ep), &cur); err != nil {
		return err.Error()
	}
	var parts []string
	for _, c := range cur.Status.Conditions {
		if c.Status != metav1.ConditionTrue {
			parts = append(parts, fmt.Sprintf("%s=%s (%s: %s)", c.Type, c.Status, c.Reason, c.Message))
		}
	}
	if len(parts) == 0 {
		return "waiting for the receiver Deployment of " + ep.Name
	}
	return strings.Join(parts, "; ")
}

// ReceiverURL is the local URL of the endpoint's receiver Service (webhook port).
func (s *Samples) ReceiverURL(proxy *ServiceProxy, ep *v1alpha1.WebhookEndpoint) (string, error) {
	return ReceiverURL(proxy, ep)
}
