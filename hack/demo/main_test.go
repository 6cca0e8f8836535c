package main

import (
	"testing"

	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// TestLinksNoKubernetesClient keeps the demo the quick first build it exists to be: it
// links the receiver, not the Kubernetes client or the operator.
func TestLinksNoKubernetesClient(t *testing.T) {
	testsupport.ForbidDeps(t, "github.com/hookkeeper/hookkeeper/internal/receiver", []string{
		"k8s.io/client-go",
		"sigs.k8s.io/controller-runtime",
		"github.com/hookkeeper/hookkeeper/controllers",
		"github.com/hookkeeper/hookkeeper/internal/devcluster",
	})
}
