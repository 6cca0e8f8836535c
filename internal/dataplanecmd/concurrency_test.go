package dataplanecmd_test

import (
	"math/rand/v2"
	"testing"

	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// TestReceiverConvergesUnderConcurrentOutOfOrderCopies is a provider against the real
// receiver (`hookkeeper receiver`, group commit at its defaults): 32 senders deliver,
// signed, every event of 24 orders in a random order, each event two or three times at
// once, retrying whatever was not answered 2xx, while an attacker's forged and replayed
// copies race them; in one run another session keeps terminating the receiver's
// database sessions, in another the senders hang up. Every 2xx must name an event already
// stored when it is read back, and in the end every order is where provider order puts
// it, every event stored once and applied, and each effect written once, in provider
// order.
func TestReceiverConvergesUnderConcurrentOutOfOrderCopies(t *testing.T) {
	for _, tc := range []struct {
		name         string
		kill, hangUp bool
	}{
		{"steady", false, false},
		{"sessions killed", true, false},
		// The senders' first attempts give up after a few milliseconds, as a provider
		// with a short timeout does: members leave groups mid-transaction.
		{"senders hang up", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			receiverConverges(t, tc.kill, tc.hangUp)
		})
	}
}

func receiverConverges(t *testing.T, kill, hangUp bool) {
	const (
		orders = 24
		victim = "hk-receiver-victim"
		secret = "whsec_chain_test"
	)
	run := newChainRun(t, secret, victim)
	bases := startReplicas(t, run.ctx, chainEndpoint(), 1)
	chain := stripeChainPosts(rand.New(rand.NewPCG(7, 8)), orders, secret)
	// A nil killer (the runs that kill nothing) does nothing.
	var killer *testsupport.SessionKiller
	if kill {
		killer = testsupport.KillSessions(run.ctx, run.checker, victim)
	}
	refused := run.spread(t, bases, chain.posts, spread{senders: 32, hangUp: hangUp, acked: killer.Progress})
	killed := killer.Stop()
	t.Logf("%d sessions terminated", killed)
	if kill && killed == 0 {
		t.Error("no session was terminated: the run crashed nothing")
	}
	if hangUp && refused == 0 {
		t.Error("no sender hung up: the run abandoned nothing")
	}
	if !kill && !hangUp && refused != 0 {
		t.Errorf("%d deliveries were not answered 2xx with nothing failing", refused)
	}
	chain.checkOutcome(t, run, entityStateSQL, "closed v4")
}
