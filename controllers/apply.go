package controllers

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
)

// apply server-side applies obj with ep as its controller owner (applyOwned).
func (r *WebhookEndpointReconciler) apply(ctx context.Context, ep *v1alpha1.WebhookEndpoint, obj client.Object) (*unstructured.Unstructured, error) {
	return applyOwned(ctx, r.Client, r.Scheme, ep, obj)
}

// applyOwned server-side applies obj (a fully specified desired object from
// internal/resources) under FieldOwner with owner as its controller owner, and returns
// the live object as the API server answered. Applying an unchanged object is a no-op
// on the server: the resourceVersion does not move. An object of that name that owner
// does not control (an app's own Service or Ingress, say) is never taken over: the
// apply fails with a *NotOwnedError instead.
func applyOwned(ctx context.Context, c client.Client, scheme *runtime.Scheme, owner, obj client.Object) (*unstructured.Unstructured, error) {
	if err := checkNotForeign(ctx, c, scheme, owner, obj); err != nil {
		return nil, err
	}
	if err := controllerutil.SetControllerReference(owner, obj, scheme); err != nil {
		return nil, fmt.Errorf("set owner of %T %s: %w", obj, obj.GetName(), err)
	}
	u, err := toApplyObject(obj)
	if err != nil {
		return nil, err
	}
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u),
		client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return nil, fmt.Errorf("apply %s %s/%s: %w", u.GetKind(), u.GetNamespace(), u.GetName(), err)
	}
	return u, nil
}

// NotOwnedError says an object the operator would write exists and belongs to someone
// else. Server-side apply with forced ownership would take its fields over, and the
// controller reference would make the garbage collector delete it with the owner.
type NotOwnedError struct {
	Kind, Namespace, Name string
	// Owner names the owner's kind.
	Owner string
}

func (e *NotOwnedError) Error() string {
	return fmt.Sprintf("%s %s/%s exists and is not managed by this %s; rename or delete it, "+
		"the operator does not take over objects it did not create", e.Kind, e.Namespace, e.Name, e.Owner)
}

// checkNotForeign returns a *NotOwnedError when obj exists and owner does not control
// it. Typed objects are read from the manager's cache (their kinds are watched), others
// from the API server.
func checkNotForeign(ctx context.Context, c client.Client, scheme *runtime.Scheme, owner, obj client.Object) error {
	live, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		return fmt.Errorf("copy %T %s", obj, obj.GetName())
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(obj), live); err != nil {
		if apierrors.IsNotFound(err) || isNotInstalled(err) {
			return nil
		}
		return fmt.Errorf("get %T %s/%s: %w", obj, obj.GetNamespace(), obj.GetName(), err)
	}
	if metav1IsControlledBy(live, owner) {
		return nil
	}
	e := &NotOwnedError{Kind: obj.GetObjectKind().GroupVersionKind().Kind, Namespace: obj.GetNamespace(), Name: obj.GetName()}
	if gvk, err := apiutil.GVKForObject(owner, scheme); err == nil {
		e.Owner = gvk.Kind
	}
	return e
}

// isNotOwned reports whether err is (or wraps) a *NotOwnedError.
func isNotOwned(err error) bool {
	var e *NotOwnedError
	return errors.As(err, &e)
}

// toApplyObject converts obj into an apply configuration: no status (the server owns
// it) and no nulls (a null in an apply configuration would claim and clear a field).
func toApplyObject(obj client.Object) (*unstructured.Unstructured, error) {
	var content map[string]any
	if u, ok := obj.(*unstructured.Unstructured); ok {
		content = runtime.DeepCopyJSON(u.Object)
	} else {
		c, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			return nil, fmt.Errorf("convert %T %s: %w", obj, obj.GetName(), err)
		}
		content = c
	}
	delete(content, "status")
	pruneNulls(content)
	u := &unstructured.Unstructured{Object: content}
	if u.GetAPIVersion() == "" || u.GetKind() == "" {
		return nil, fmt.Errorf("apply %T %s: apiVersion and kind must be set", obj, obj.GetName())
	}
	return u, nil
}

func pruneNulls(v any) {
	switch t := v.(type) {
	case map[string]any:
		for k, child := range t {
			if child == nil {
				delete(t, k)
				continue
			}
			pruneNulls(child)
		}
	case []any:
		for _, child := range t {
			pruneNulls(child)
		}
	}
}

// deleteOwned deletes obj if ep controls it (deleteIfOwned).
func (r *WebhookEndpointReconciler) deleteOwned(ctx context.Context, ep *v1alpha1.WebhookEndpoint, obj client.Object) error {
	return deleteIfOwned(ctx, r.Client, r.reader(), ep, obj)
}

// deleteIfOwned deletes obj (named, with apiVersion/kind set) if it exists and owner
// controls it; an object of the same name that someone else owns is left alone. A kind
// that is not installed has nothing to delete.
func deleteIfOwned(ctx context.Context, c client.Client, reader client.Reader, owner, obj client.Object) error {
	key := client.ObjectKeyFromObject(obj)
	if err := reader.Get(ctx, key, obj); err != nil {
		if client.IgnoreNotFound(err) == nil || isNotInstalled(err) {
			return nil
		}
		return fmt.Errorf("get %T %s: %w", obj, key, err)
	}
	if !metav1IsControlledBy(obj, owner) {
		return nil
	}
	if err := c.Delete(ctx, obj, client.PropagationPolicy("Background")); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete %T %s: %w", obj, key, err)
	}
	return nil
}

func metav1IsControlledBy(obj, owner client.Object) bool {
	for _, ref := range obj.GetOwnerReferences() {
		if ref.Controller != nil && *ref.Controller && ref.UID == owner.GetUID() {
			return true
		}
	}
	return false
}
