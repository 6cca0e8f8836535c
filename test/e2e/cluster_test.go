package e2e

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/gomega" //nolint:revive // gomega's matchers read best unqualified
	appsv1 "k8s.io/api/apps/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/resources"
)

// awaitRollout waits until the receiver Deployment's pod template hash differs from
// oldHash and every replica runs the new template; it returns the new hash.
func awaitRollout(ctx context.Context, ns, name, oldHash string) string {
	var hash string
	Eventually(func(g Gomega) {
		d, err := clientset.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		hash = d.Spec.Template.Annotations[resources.AnnotationConfigHash]
		g.Expect(hash).NotTo(Equal(oldHash))
		g.Expect(rolledOut(d)).To(BeTrue(), "deployment status %+v", d.Status)
		pods := receiverPods(ctx, g, d)
		g.Expect(pods).To(HaveLen(int(*d.Spec.Replicas)))
		for _, p := range pods {
			g.Expect(p.Annotations[resources.AnnotationConfigHash]).To(Equal(hash))
		}
		// Old pods keep serving while they drain (--drain-delay): the rollout is over
		// for the sender only once they are gone, not when the new ones are ready.
		all, err := clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{
			LabelSelector: labels.SelectorFromSet(d.Spec.Selector.MatchLabels).String(),
		})
		g.Expect(err).NotTo(HaveOccurred())
		for _, p := range all.Items {
			g.Expect(p.Annotations[resources.AnnotationConfigHash]).To(Equal(hash), "pod %s of the old template still exists", p.Name)
		}
	}).WithTimeout(2 * time.Minute).WithPolling(250 * time.Millisecond).Should(Succeed())
	return hash
}

// receiverDeployment is the receiver Deployment of ep as the API server has it now.
func receiverDeployment(ctx context.Context, ep *v1alpha1.WebhookEndpoint) *appsv1.Deployment {
	d, err := clientset.AppsV1().Deployments(session.Samples.Namespace).Get(ctx, resources.ReceiverName(ep), metav1.GetOptions{})
	Expect(err).NotTo(HaveOccurred())
	return d
}

// updateSecret applies change to the data of Secret ns/name, retrying on conflicts.
func updateSecret(ctx context.Context, ns, name string, change func(data map[string][]byte)) {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s, err := clientset.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(s.Data)
		_, err = clientset.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{})
		return err
	})
	Expect(err).NotTo(HaveOccurred())
}

// updateEndpoint applies change to the stored endpoint, retrying on conflicts, and
// returns the updated object.
func updateEndpoint(ctx context.Context, ep *v1alpha1.WebhookEndpoint, change func(*v1alpha1.WebhookEndpoint)) *v1alpha1.WebhookEndpoint {
	current := &v1alpha1.WebhookEndpoint{}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := session.Samples.Client.Get(ctx, client.ObjectKeyFromObject(ep), current); err != nil {
			return err
		}
		change(current)
		return session.Samples.Client.Update(ctx, current)
	})
	Expect(err).NotTo(HaveOccurred())
	return current
}

// object names one namespaced object.
type object struct {
	kind, name string
	uid        types.UID
}

func (o object) String() string { return fmt.Sprintf("%s/%s", o.kind, o.name) }

// ownedObjects lists the objects of ns that root owns, directly or through owners it
// owns (a Deployment's ReplicaSets and their Pods, a Job's Pods).
func ownedObjects(ctx context.Context, g Gomega, ns string, root types.UID) []object {
	type listed struct {
		object
		owners []metav1.OwnerReference
	}
	opts := metav1.ListOptions{}
	core, apps := clientset.CoreV1(), clientset.AppsV1()
	lists := []struct {
		kind string
		list func() (runtime.Object, error)
	}{
		{"Deployment", func() (runtime.Object, error) { return apps.Deployments(ns).List(ctx, opts) }},
		{"ReplicaSet", func() (runtime.Object, error) { return apps.ReplicaSets(ns).List(ctx, opts) }},
		{"Pod", func() (runtime.Object, error) { return core.Pods(ns).List(ctx, opts) }},
		{"Service", func() (runtime.Object, error) { return core.Services(ns).List(ctx, opts) }},
		{"ServiceAccount", func() (runtime.Object, error) { return core.ServiceAccounts(ns).List(ctx, opts) }},
		{"ConfigMap", func() (runtime.Object, error) { return core.ConfigMaps(ns).List(ctx, opts) }},
		{"Secret", func() (runtime.Object, error) { return core.Secrets(ns).List(ctx, opts) }},
		{"Job", func() (runtime.Object, error) { return clientset.BatchV1().Jobs(ns).List(ctx, opts) }},
		{"PodDisruptionBudget", func() (runtime.Object, error) { return clientset.PolicyV1().PodDisruptionBudgets(ns).List(ctx, opts) }},
		{"NetworkPolicy", func() (runtime.Object, error) { return clientset.NetworkingV1().NetworkPolicies(ns).List(ctx, opts) }},
		{"Ingress", func() (runtime.Object, error) { return clientset.NetworkingV1().Ingresses(ns).List(ctx, opts) }},
	}
	var all []listed
	for _, l := range lists {
		list, err := l.list()
		g.Expect(err).NotTo(HaveOccurred(), "list %ss", l.kind)
		items, err := apimeta.ExtractList(list)
		g.Expect(err).NotTo(HaveOccurred())
		for _, item := range items {
			m, err := apimeta.Accessor(item)
			g.Expect(err).NotTo(HaveOccurred())
			all = append(all, listed{object{l.kind, m.GetName(), m.GetUID()}, m.GetOwnerReferences()})
		}
	}

	// The closure of "owned by": repeat until no object joins.
	owners := map[types.UID]bool{root: true}
	var out []object
	for grew := true; grew; {
		grew = false
		for _, o := range all {
			if owners[o.uid] {
				continue
			}
			for _, ref := range o.owners {
				if owners[ref.UID] {
					owners[o.uid] = true
					out = append(out, o.object)
					grew = true
					break
				}
			}
		}
	}
	return out
}
