package convergence

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
)

// machine is one endpoint under test: a sample's state machine, the receiver serving
// it and the entities whose histories are delivered to it.
type machine struct {
	name     string // "orders" or "adyen"
	provider v1alpha1.ProviderType
	sample   *sample
	we       *v1alpha1.WebhookEndpoint // the sample, typed
	endpoint string                    // namespace/name, as in the receipts and the envelopes
	model    *model
	attrs    []string // candidate event attributes for generate
	secret   string   // Stripe signing secret, or Adyen HMAC key (hex)
	proc     *receiverProc
	entities []*entity
}

// entity is one entity's history, what the model expects of it and how it was delivered.
type entity struct {
	m         *machine
	idx       int
	key       string
	amount    int64
	paymentID string // Adyen: the payment's pspReference (originalReference of the others)
	history   []modelEvent
	expected  outcome
	ambiguous bool
	why       string
	// deliveries, in plan order.
	deliveries []delivery
	// overlapped is set when two or more requests carrying this entity were in flight
	// (sent, not yet acknowledged) at the same time.
	overlapped bool
}

func (e *entity) String() string { return e.m.name + "/" + e.key }

type delivery struct {
	req          *request
	event        int
	copy, copies int
}

// item is one copy of one event of one entity.
type item struct {
	e            *entity
	event        int
	copy, copies int
}

// request is one HTTP request: a Stripe event or an Adyen batch of items.
type request struct {
	seq   int // position in the plan
	m     *machine
	items []item
	body  []byte
	// set by the sender that delivered it (read after all senders are done)
	acked    int64 // order of acknowledgement, from 1; 0 when never acknowledged
	attempts int
}

// generate draws n entities for m, with histories the machine allows in provider
// order: occurredAt strictly increasing, 1 to 15 s apart, all in the last hour; one
// amount per entity.
func (m *machine) generate(rng *rand.Rand, n int, now time.Time) {
	const stop = 0.1
	for i := range n {
		e := &entity{m: m, idx: i, amount: 100 + rng.Int64N(99_900)}
		switch m.provider {
		case v1alpha1.ProviderAdyen:
			e.key = fmt.Sprintf("pay-%06d", i)
			e.paymentID = fmt.Sprintf("%016d", 8814_0000_0000_0000+int64(i))
		default:
			e.key = fmt.Sprintf("order-%06d", i)
		}
		e.history = m.model.generate(rng, e.amount, stop, m.attrs)
		at := now.Add(-10*time.Minute - time.Duration(rng.Int64N(int64(50*time.Minute)))).Truncate(time.Second)
		for j := range e.history {
			ev := &e.history[j]
			at = at.Add(time.Duration(1+rng.IntN(15)) * time.Second)
			ev.OccurredAt = at
			switch m.provider {
			case v1alpha1.ProviderAdyen:
				ev.PSP = fmt.Sprintf("%016d", 8815_0000_0000_0000+int64(i)*10+int64(j))
				if ev.Type == "AUTHORISATION" {
					ev.PSP = e.paymentID
				}
				ev.ID = adyenEventID(*ev)
			default:
				ev.ID = fmt.Sprintf("evt_conv_%06d_%d", i, j)
				ev.PSP = "pi_" + e.key
			}
		}
		e.expected = m.model.run(e.history, e.amount)
		e.ambiguous, e.why = m.model.ambiguous(e.history, e.amount)
		m.entities = append(m.entities, e)
	}
}

// adyenOriginal is the originalReference of an Adyen item: none for the
// authorisation, the payment's pspReference for the modifications.
func (e *entity) adyenOriginal(ev modelEvent) string {
	if ev.Type == "AUTHORISATION" {
		return ""
	}
	return e.paymentID
}

func copiesOf(rng *rand.Rand, machines []*machine) [][]item {
	var perEntity [][]item
	for _, m := range machines {
		for _, e := range m.entities {
			var items []item
			for j := range e.history {
				n := 1 + rng.IntN(3)
				for c := range n {
					items = append(items, item{e: e, event: j, copy: c + 1, copies: n})
				}
			}
			perEntity = append(perEntity, items)
		}
	}
	return perEntity
}

// planRandom is a random permutation of every copy of every event of both machines.
// About a third of the entities arrive as a burst (all their copies adjacent, shuffled)
// so that several deliveries of one entity are in flight at once; the others are
// scattered. Adyen items are sent one per request or batched 2 to 5 per request, the
// batch taking the next Adyen items of the permutation (any entities).
func planRandom(rng *rand.Rand, machines []*machine) []*request {
	var units [][]item
	for _, items := range copiesOf(rng, machines) {
		rng.Shuffle(len(items), func(i, j int) { items[i], items[j] = items[j], items[i] })
		if rng.Float64() < 0.35 {
			units = append(units, items)
			continue
		}
		for _, it := range items {
			units = append(units, []item{it})
		}
	}
	rng.Shuffle(len(units), func(i, j int) { units[i], units[j] = units[j], units[i] })
	var seq []item
	for _, u := range units {
		seq = append(seq, u...)
	}

	var adyenQueue []int // positions of Adyen items in seq, in order
	for i, it := range seq {
		if it.e.m.provider == v1alpha1.ProviderAdyen {
			adyenQueue = append(adyenQueue, i)
		}
	}
	used := make([]bool, len(seq))
	var reqs []*request
	for i, it := range seq {
		if used[i] {
			continue
		}
		if it.e.m.provider != v1alpha1.ProviderAdyen {
			reqs = append(reqs, &request{m: it.e.m, items: []item{it}})
			continue
		}
		k := 1
		if rng.Float64() < 0.5 {
			k = 2 + rng.IntN(4)
		}
		r := &request{m: it.e.m}
		for len(r.items) < k && len(adyenQueue) > 0 {
			p := adyenQueue[0]
			adyenQueue = adyenQueue[1:]
			if used[p] {
				continue
			}
			used[p] = true
			r.items = append(r.items, seq[p])
		}
		reqs = append(reqs, r)
	}
	finish(reqs)
	return reqs
}

// planInOrder delivers each entity's history in provider order: an event's copies one
// after the other, and the next event only once they are all acknowledged. Adyen items
// of one entity are batched 1 to 3 per request, in order. It returns one job (a
// sequence of requests) per entity, jobs shuffled.
func planInOrder(rng *rand.Rand, machines []*machine) ([]*request, [][]*request) {
	var jobs [][]*request
	for _, items := range copiesOf(rng, machines) {
		var job []*request
		for i := 0; i < len(items); {
			k := 1
			if items[i].e.m.provider == v1alpha1.ProviderAdyen {
				k = 1 + rng.IntN(3)
			}
			k = min(k, len(items)-i)
			job = append(job, &request{m: items[i].e.m, items: items[i : i+k]})
			i += k
		}
		jobs = append(jobs, job)
	}
	rng.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
	var reqs []*request
	for _, job := range jobs {
		reqs = append(reqs, job...)
	}
	finish(reqs)
	return reqs, jobs
}

// finish numbers the requests and records each entity's deliveries.
func finish(reqs []*request) {
	for i, r := range reqs {
		r.seq = i
		for _, it := range r.items {
			it.e.deliveries = append(it.e.deliveries, delivery{req: r, event: it.event, copy: it.copy, copies: it.copies})
		}
	}
}

// describe is an entity's history, delivery order and receipts, for failure messages.
func (e *entity) describe(receipts []receiptRow) string {
	var b strings.Builder
	fmt.Fprintf(&b, "entity %s (endpoint %s, amount %d)\n", e, e.m.endpoint, e.amount)
	b.WriteString("  history, in provider order:\n")
	for _, ev := range e.history {
		fmt.Fprintf(&b, "    %s\n", ev)
	}
	fmt.Fprintf(&b, "  in-order path: %s\n", strings.Join(e.expected.Path, " -> "))
	if e.ambiguous {
		fmt.Fprintf(&b, "  ambiguous: %s\n", e.why)
	}
	b.WriteString("  delivery plan (request position: event copy, batch size, acknowledged as n-th request, attempts):\n")
	for _, d := range e.deliveries {
		fmt.Fprintf(&b, "    req %d: #%d copy %d/%d, batch of %d, ack %d, attempts %d\n",
			d.req.seq, d.event, d.copy, d.copies, len(d.req.items), d.req.acked, d.req.attempts)
	}
	if e.overlapped {
		b.WriteString("  (several of its requests were in flight at once)\n")
	}
	b.WriteString("  receipts, in insertion order:\n")
	for _, r := range receipts {
		fmt.Fprintf(&b, "    %s %s occurred %s: %s %q\n", r.EventID, r.Type, r.OccurredAt.Format(time.RFC3339), r.Outcome, r.Detail)
	}
	return b.String()
}
