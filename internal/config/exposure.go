package config

import (
	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/expr"
)

// validateExposure rejects an Ingress path other than the receiver's: an Ingress
// forwards the request path unchanged and the receiver serves spec.receiver.path only,
// so every webhook would get 404. (An HTTPRoute rewrites its prefix to the receiver
// path, so its path may differ.) The CRD carries the same rule; this catches objects
// stored before it.
func validateExposure(spec *v1alpha1.WebhookEndpointSpec) error {
	ex := spec.Exposure
	if ex == nil || ex.Ingress == nil || ex.Ingress.Path == "" || ex.Ingress.Path == spec.Receiver.Path {
		return nil
	}
	return expr.Errorf("spec.exposure.ingress.path",
		"%q differs from spec.receiver.path %q: an Ingress does not rewrite paths and the receiver answers 404 on any other path; leave it empty or set spec.receiver.path to the public path",
		ex.Ingress.Path, spec.Receiver.Path)
}
