package controllers

import (
	"context"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/hookkeeper/hookkeeper/internal/resources"
)

// reconcileNetworkPolicy fences the receiver pods, or removes the fence when disabled.
func (r *WebhookEndpointReconciler) reconcileNetworkPolicy(ctx context.Context, st *state) error {
	desired := resources.NetworkPolicy(st.ep)
	if resources.WantsNetworkPolicy(st.ep) {
		_, err := r.apply(ctx, st.ep, desired)
		return err
	}
	return r.deleteOwned(ctx, st.ep, &networkingv1.NetworkPolicy{ObjectMeta: desired.ObjectMeta})
}
