package main

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/config"
)

// kubeFlags select a cluster and namespace the way kubectl does: --kubeconfig, else
// $KUBECONFIG, else ~/.kube/config; --context, else the current context; -n, else the
// context's namespace, else "default".
type kubeFlags struct {
	kubeconfig, context, namespace string
}

// fromCluster reads the WebhookEndpoint name with the user's credentials, and the
// Secret keys its spec references, and returns it defaulted with the getenv that
// config.Compile and refetch read in place of os.Getenv (see config.EnvFromSecrets).
// set holds variables given on the command line (--database-url): their Secrets are
// not read.
func fromCluster(ctx context.Context, kf kubeFlags, name string, set map[string]string) (*v1alpha1.WebhookEndpoint, func(string) string, error) {
	c, ns, err := kubeClient(kf)
	if err != nil {
		return nil, nil, err
	}
	return readEndpoint(ctx, c, ns, name, set)
}

// kubeClient connects to the cluster kf selects and returns the namespace it selects.
func kubeClient(kf kubeFlags) (client.Client, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kf.kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: kf.context})
	ns := kf.namespace
	if ns == "" {
		var err error
		if ns, _, err = cc.Namespace(); err != nil {
			return nil, "", fmt.Errorf("load kubeconfig: %w", err)
		}
	}
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("load kubeconfig: %w", err)
	}
	cfg.Timeout = 30 * time.Second
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, "", err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, "", err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, "", fmt.Errorf("connect to the cluster at %s: %w", cfg.Host, err)
	}
	return c, ns, nil
}

// readEndpoint is fromCluster with a client.
func readEndpoint(ctx context.Context, c client.Client, ns, name string, set map[string]string) (*v1alpha1.WebhookEndpoint, func(string) string, error) {
	we := &v1alpha1.WebhookEndpoint{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, we); err != nil {
		return nil, nil, getError(err, "webhookendpoints.hookkeeper.dev", ns, name)
	}
	we.Spec.Default()

	secrets := map[string]*corev1.Secret{}
	lookup := func(secret, key string) (string, error) {
		s, ok := secrets[secret]
		if !ok {
			s = &corev1.Secret{}
			if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: secret}, s); err != nil {
				return "", getError(err, "secrets", ns, secret)
			}
			secrets[secret] = s
		}
		v, ok := s.Data[key]
		if !ok {
			return "", fmt.Errorf("Secret %s/%s key %q not found", ns, secret, key) //nolint:staticcheck // Secret is the kind's name
		}
		return string(v), nil
	}
	getenv, err := config.EnvFromSecrets(we, lookup, set, time.Now())
	if err != nil {
		return nil, nil, fmt.Errorf("WebhookEndpoint %s/%s: %w", ns, name, err)
	}
	return we, getenv, nil
}

// getError says what a failed GET of resource ns/name means to the person running the
// command: missing, or not theirs to read (and which verb on which resource).
func getError(err error, resource, ns, name string) error {
	switch {
	case apierrors.IsNotFound(err) && resource == "webhookendpoints.hookkeeper.dev":
		return fmt.Errorf("no WebhookEndpoint %q in namespace %q (kubectl -n %s get webhookendpoints lists them)", name, ns, ns)
	case apierrors.IsNotFound(err):
		return fmt.Errorf("Secret %s/%s not found", ns, name) //nolint:staticcheck // Secret is the kind's name
	case apierrors.IsForbidden(err):
		return fmt.Errorf("forbidden: your kubeconfig's credentials may not get %s in namespace %q (reading %s): %w", resource, ns, name, err)
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("get %s %s/%s: the cluster rejected your kubeconfig's credentials: %w", resource, ns, name, err)
	case meta.IsNoMatchError(err):
		return fmt.Errorf("the cluster serves no WebhookEndpoint resource (are hookkeeper's CRDs installed?): %w", err)
	}
	return fmt.Errorf("get %s %s/%s: %w", resource, ns, name, err)
}
