package resources

import (
	"testing"

	"k8s.io/utils/ptr"

	"github.com/hookkeeper/hookkeeper/internal/config"
)

func TestServiceAndPDB(t *testing.T) {
	ep := endpoint()
	svc := EndpointReceivers(ep, Options{}).Service()
	ports := map[string][2]int32{}
	for _, p := range svc.Spec.Ports {
		ports[p.Name] = [2]int32{p.Port, 0}
		if p.TargetPort.StrVal != p.Name {
			t.Errorf("port %s targets %v", p.Name, p.TargetPort)
		}
	}
	if ports[PortNameHTTP][0] != 80 || ports[PortNameMetrics][0] != config.AdminPort {
		t.Errorf("service ports = %v", ports)
	}
	if sa := EndpointReceivers(ep, Options{}).ServiceAccount(); *sa.AutomountServiceAccountToken {
		t.Error("ServiceAccount must not automount a token")
	}
	for _, tc := range []struct {
		replicas *int32
		want     bool
	}{{ptr.To[int32](1), false}, {ptr.To[int32](2), true}, {ptr.To[int32](0), false}, {nil, true}} {
		e := endpoint()
		e.Spec.Receiver.Replicas = tc.replicas
		if got := EndpointReceivers(e, options(t, e, now)).WantsPDB(); got != tc.want {
			t.Errorf("replicas %v: WantsPDB = %v", tc.replicas, got)
		}
	}
	pdb := EndpointReceivers(ep, Options{}).PodDisruptionBudget()
	if pdb.Spec.MaxUnavailable.IntValue() != 1 || pdb.Spec.MinAvailable != nil {
		t.Errorf("pdb = %+v", pdb.Spec)
	}
}
