package e2e

import (
	"os/exec"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2" //nolint:revive // Ginkgo's DSL reads best unqualified
	. "github.com/onsi/gomega"    //nolint:revive // gomega's matchers read best unqualified

	"github.com/hookkeeper/hookkeeper/internal/demo"
)

// `hookkeeper send-test` against an endpoint of the Stripe orders sample's shape, as a user runs it
// against `make dev`'s cluster: the binary, the dev cluster's kubeconfig, no --url (it
// finds a ready receiver pod behind the endpoint's Service) and no --database-url (the
// dev database is reachable at the URL its Secret holds).
var _ = Describe("hookkeeper send-test", func() {
	It("sends the deployed endpoint a signed test event and reports its receipt and delivery", func(ctx SpecContext) {
		// An endpoint of its own: the sample's specs rotate and delete the sample's, and
		// specs run in random order.
		ep := createOwnEndpoint(ctx, "sendtest-e2e", 90*time.Second)
		before := len(session.Sink.Deliveries())
		cmd := exec.CommandContext(ctx, hookkeeperBinary, "send-test",
			"--kubeconfig", session.Cluster.KubeconfigPath(), "-n", session.Samples.Namespace, ep.Name)
		out, err := cmd.CombinedOutput()
		report := string(out)
		GinkgoWriter.Printf("hookkeeper send-test:\n%s\n", report)
		Expect(err).NotTo(HaveOccurred(), report)
		Expect(report).To(ContainSubstring("of Service " + ep.Name + "-receiver"))
		Expect(report).To(ContainSubstring("answer:    200"))
		Expect(report).To(ContainSubstring("receipt:   applied"))
		Expect(report).To(ContainSubstring("entity:    " + demo.TestOrder + " is payment_pending"))
		Expect(report).To(MatchRegexp(`outbox:    order\.test \(row \d+\) delivered at`))
		Expect(report).NotTo(ContainSubstring(ownSecretsSigningKey))
		Expect(report).NotTo(ContainSubstring(databaseURL))

		Eventually(func() []string {
			var types []string
			for _, d := range session.Sink.Deliveries()[before:] {
				types = append(types, d.EventType)
			}
			return types
		}).WithTimeout(10 * time.Second).Should(ContainElement("order.test"))
		Expect(strings.Count(report, "POST")).To(Equal(1))
	}, SpecTimeout(4*time.Minute))
})
