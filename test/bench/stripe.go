package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/stripe/stripe-go/v85"
	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// Mix of the receiver load: most deliveries are new events, some are the provider's
// retries of events already delivered, a few are forgeries.
const (
	shareBadSignature = 0.05
	shareDuplicate    = 0.10
)

// orderAmount is the expected amount of every bench order; events carry the same
// amount, so the capture guard holds and each new event applies a transition.
const orderAmount = 4999

// stripeLoad makes pre-signed Stripe-shaped deliveries of payment_intent.succeeded,
// event <eventPrefix><n> for order <orderPrefix><n>. It remembers what it generated, so
// later phases can send duplicates of earlier events and the suite can check what was
// stored.
type stripeLoad struct {
	url         string
	secret      []byte
	eventPrefix string // e.g. evt_bench_; forgeries get <eventPrefix>forged_
	orderPrefix string // e.g. rx-
	rng         *rand.Rand
	nextID      int     // next new event number
	sent        []event // authentic new events sent so far, for duplicates
	// delivered counts the distinct new events sent; each must end up stored once.
	delivered int
}

// event is a new event sent: enough to build the same body again for a duplicate.
type event struct {
	id      int
	created int64
}

type target struct {
	body   []byte
	header http.Header
}

func newStripeLoad(url string, secret []byte, eventPrefix, orderPrefix string) *stripeLoad {
	return &stripeLoad{url: url, secret: secret, eventPrefix: eventPrefix, orderPrefix: orderPrefix,
		rng: rand.New(rand.NewPCG(1, 2)), nextID: 1}
}

// batch is one phase's pre-signed requests.
type batch struct {
	targets []vegeta.Target
	isNew   []bool
	idFrom  int // first new event number in the batch
	idTo    int // one past the last
	next    atomic.Int64
}

// make pre-signs n requests in the configured mix. Signing happens here, before the
// clock starts, so the load generator spends its CPU on sending. A duplicate is signed
// again with the current time, as Stripe signs every delivery attempt: the original
// signature may be older than the 5-minute tolerance by then.
func (l *stripeLoad) make(n int) *batch {
	b := &batch{idFrom: l.nextID, targets: make([]vegeta.Target, 0, n), isNew: make([]bool, 0, n)}
	now := time.Now().Unix()
	for range n {
		r := l.rng.Float64()
		var t target
		isNew := false
		switch {
		case r < shareBadSignature:
			body := stripeBody(l.eventPrefix+"forged_"+strconv.Itoa(l.rng.IntN(1<<30)), l.orderPrefix+"0", now)
			t = target{body: body, header: stripeHeader([]byte("whsec_not_the_secret"), now, body)}
		case r < shareBadSignature+shareDuplicate && len(l.sent) > 0:
			e := l.sent[l.rng.IntN(len(l.sent))]
			body := l.body(e)
			t = target{body: body, header: stripeHeader(l.secret, now, body)}
		default:
			id := l.nextID
			l.nextID++
			e := event{id: id, created: now}
			body := l.body(e)
			t = target{body: body, header: stripeHeader(l.secret, now, body)}
			l.sent = append(l.sent, e)
			isNew = true
		}
		b.targets = append(b.targets, vegeta.Target{Method: http.MethodPost, URL: l.url, Body: t.body, Header: t.header})
		b.isNew = append(b.isNew, isNew)
	}
	b.idTo = l.nextID
	return b
}

// repeats pre-signs n deliveries of events already sent (all duplicates; none when
// nothing was sent yet): load that needs no new orders and leaves no new receipts.
func (l *stripeLoad) repeats(n int) *batch {
	b := &batch{idFrom: l.nextID, idTo: l.nextID}
	if len(l.sent) == 0 {
		return b
	}
	now := time.Now().Unix()
	for range n {
		body := l.body(l.sent[l.rng.IntN(len(l.sent))])
		b.targets = append(b.targets, vegeta.Target{Method: http.MethodPost, URL: l.url, Body: body,
			Header: stripeHeader(l.secret, now, body)})
		b.isNew = append(b.isNew, false)
	}
	return b
}

// body is the delivery of new event e, the same bytes every time.
func (l *stripeLoad) body(e event) []byte {
	n := strconv.Itoa(e.id)
	return stripeBody(l.eventPrefix+n, l.orderPrefix+n, e.created)
}

// settle records which of the batch's requests were actually sent: new events that were
// not sent are forgotten, so later duplicates only repeat events the receiver saw.
func (l *stripeLoad) settle(b *batch) {
	sent := min(int(b.next.Load()), len(b.targets))
	unsent := 0
	for i, isNew := range b.isNew {
		switch {
		case !isNew:
		case i < sent:
			l.delivered++
		default:
			unsent++
		}
	}
	l.sent = l.sent[:len(l.sent)-unsent]
}

// targeter hands out the batch's requests in order and stops the attack when they run
// out (the suite sizes batches so that does not happen in a phase).
func (b *batch) targeter() vegeta.Targeter {
	return func(tgt *vegeta.Target) error {
		i := b.next.Add(1) - 1
		if i >= int64(len(b.targets)) {
			return vegeta.ErrNoTargets
		}
		*tgt = b.targets[i]
		return nil
	}
}

// stripeBody is the event as Stripe sends it, with the API version stripe-go expects
// (its webhook.ConstructEvent refuses events of another release train).
func stripeBody(eventID, orderKey string, created int64) []byte {
	return fmt.Appendf(nil, `{"id":%q,"object":"event","api_version":%q,"created":%d,`+
		`"type":"payment_intent.succeeded","livemode":false,"pending_webhooks":1,`+
		`"data":{"object":{"id":"pi_%s","object":"payment_intent","amount":%d,"amount_received":%d,`+
		`"currency":"inr","status":"succeeded","metadata":{"client_txn_id":%q}}}}`,
		eventID, stripe.APIVersion, created, eventID, orderAmount, orderAmount, orderKey)
}

// stripeHeader signs like Stripe: HMAC-SHA256 over "<t>.<body>" keyed with the whole
// endpoint secret, hex in v1=.
func stripeHeader(secret []byte, ts int64, body []byte) http.Header {
	mac := hmac.New(sha256.New, secret)
	t := strconv.FormatInt(ts, 10)
	mac.Write([]byte(t))
	mac.Write([]byte("."))
	mac.Write(body)
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Stripe-Signature", "t="+t+",v1="+hex.EncodeToString(mac.Sum(nil)))
	return h
}
