package dataplanecmd_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/internal/demo"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// A member removed and added back while its old version is still draining (a request
// in flight holds it, as a slow provider connection or a dispatcher's grace would): the
// re-added version is the one serving, so the old version's drain must not forget the
// endpoint's metric series (the new unit's handler, in-flight limiter and group-commit
// observer hold children made at build time: they would be gone from /metrics for as
// long as that version serves) nor delete this pod's heartbeat row (the operator would
// report the endpoint not loaded until the next heartbeat, here 30 s away).
func TestPoolReaddWhileOldDrainsKeepsMetricsAndHeartbeat(t *testing.T) {
	db := testsupport.MigratedDatabase(t, "shared")
	vol := newSecretVolume(t)
	const name = "readd"
	manifest := poolEndpoint{name: name, schema: "shared"}.manifest()
	vol.set(name, manifest, poolEnv(db, "whsec_readd"))
	p := startPool(t, vol.dir, "--heartbeat-interval", "30s")
	conn := connect(t, db)
	rowCount := func() int {
		return count(t, conn, `SELECT count(*) FROM shared.receiver_heartbeats WHERE endpoint = $1 AND pod = 'pool-pod-0'`, "shop/"+name)
	}
	if c := p.post(t, "/"+name+"/", "whsec_readd"); c != http.StatusOK {
		t.Fatalf("first webhook: %d", c)
	}
	slow := startSlow(t, p.webhook+"/"+name+"/", "whsec_readd")
	testsupport.Eventually(t, 10*time.Second, 20*time.Millisecond, "the slow request to be in flight", func() error {
		if v := inFlight("shop/" + name); v < 1 {
			return fmt.Errorf("in flight %v", v)
		}
		return nil
	})

	// Remove the member (the old unit drains, held by the slow request) ...
	vol.remove(name)
	testsupport.Eventually(t, 10*time.Second, 20*time.Millisecond, "the member to be gone", func() error {
		if _, ok := p.endpoints(t)[name]; ok {
			return fmt.Errorf("still listed")
		}
		return nil
	})
	// ... and add it back, same files, before the old version finished draining.
	vol.set(name, manifest, poolEnv(db, "whsec_readd"))
	testsupport.Eventually(t, 15*time.Second, 50*time.Millisecond, "the member back, with its heartbeat row", func() error {
		if e, ok := p.endpoints(t)[name]; !ok || e.Key == "" {
			return fmt.Errorf("not served yet: %+v", e)
		}
		if n := rowCount(); n != 1 {
			return fmt.Errorf("%d heartbeat rows", n)
		}
		return nil
	})
	if c := p.post(t, "/"+name+"/", "whsec_readd"); c != http.StatusOK {
		t.Fatalf("webhook to the re-added member: %d", c)
	}
	// Let the old version finish draining, then watch what its drain leaves.
	slow.release()
	select {
	case c := <-slow.code:
		t.Logf("slow request on the removed version answered %d", c)
	case <-time.After(30 * time.Second):
		t.Fatal("slow request never answered")
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if c := p.post(t, "/"+name+"/", "whsec_readd"); c != http.StatusOK {
			t.Fatalf("webhook to the re-added member: %d", c)
		}
		if n := rowCount(); n != 1 {
			t.Fatalf("the heartbeat row of an endpoint this pod serves was deleted by the drain of its removed version (rows %d)", n)
		}
		text := scrapeMetrics(t, p.admin)
		for _, series := range []string{
			`hookkeeper_webhook_request_duration_seconds_count{endpoint="shop/` + name + `"}`,
			`hookkeeper_webhook_in_flight_requests{endpoint="shop/` + name + `"}`,
		} {
			if !strings.Contains(text, series) {
				t.Fatalf("the re-added member serves webhooks but /metrics lost %s (the removed version's drain forgot it)", series)
			}
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-p.Done():
			t.Fatal(p.Exited())
		}
	}
}

// The kubelet swaps ..data to a new timestamped directory and then deletes the old
// one. A pool poll that resolved ..data just before the swap and reads the files just
// after the deletion finds them missing, and treats every member it could not read as
// removed: the member is unrouted (404), its heartbeat row and metrics dropped, and it
// is rebuilt at the next poll. Here a member whose files never change must keep being
// served by the same version (servedSince constant, never absent from /endpoints, no
// 404) while other members' files are updated repeatedly, as the operator does when
// any member of the pool changes.
func TestPoolKubeletSwapMidReadKeepsMembers(t *testing.T) {
	db := testsupport.MigratedDatabase(t, "shared")
	vol := newSecretVolume(t)
	const victim = "zz-steady"
	vol.files[victim+".json"] = poolEndpoint{name: victim, schema: "shared"}.manifest()
	vol.files[victim+".env"] = []byte("DATABASE_URL=" + db + "\nHOOKKEEPER_SIGNING_SECRET_0=whsec_steady\n")
	// Many incomplete members (a NAME.json whose NAME.env is not there yet) sort before
	// the victim: the pool reads each, which widens the window between resolving ..data
	// and reading the victim's files, as a pool of a few hundred members has.
	filler := strings.Repeat("x", 2048)
	for i := range 300 {
		vol.files[fmt.Sprintf("a-%03d.json", i)] = []byte(`{"pad":"` + filler + `"}`)
	}
	vol.publish()
	p := startPool(t, vol.dir, "--endpoints-poll", "20ms")

	var first time.Time
	testsupport.Eventually(t, 15*time.Second, 20*time.Millisecond, "the victim to be served", func() error {
		e, ok := p.endpoints(t)[victim]
		if !ok || e.ServedSince == nil {
			return fmt.Errorf("not served: %+v", e)
		}
		first = *e.ServedSince
		return nil
	})

	// Another member's files change over and over (its .json toggles), as many
	// atomic updates as fit in the window.
	stop := make(chan struct{})
	var updates atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			vol.files["a-000.json"] = []byte(fmt.Sprintf(`{"n":%d}`, i))
			vol.publish()
			updates.Add(1)
		}
	})
	defer func() { close(stop); wg.Wait() }()

	var codes sync.Map
	var posted atomic.Int64
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			c, err := p.postErr("/"+victim+"/", "whsec_steady")
			if err != nil {
				c = 0
			}
			posted.Add(1)
			n, _ := codes.LoadOrStore(c, new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
		}
	})

	deadline := time.Now().Add(6 * time.Second)
	var problem string
	for time.Now().Before(deadline) && problem == "" {
		e, ok := p.endpoints(t)[victim]
		switch {
		case !ok:
			problem = "the member vanished from /endpoints"
		case e.ServedSince == nil || !e.ServedSince.Equal(first):
			problem = fmt.Sprintf("the member was rebuilt (servedSince %v, first %v) though its files never changed", e.ServedSince, first)
		}
		if v, ok := codes.Load(http.StatusNotFound); ok && v.(*atomic.Int64).Load() > 0 {
			problem = fmt.Sprintf("%d webhooks to the unchanged member got 404", v.(*atomic.Int64).Load())
		}
		select {
		case <-time.After(5 * time.Millisecond):
		case <-p.Done():
			t.Fatal(p.Exited())
		}
	}
	summary := []string{}
	codes.Range(func(k, v any) bool {
		summary = append(summary, fmt.Sprintf("%v:%d", k, v.(*atomic.Int64).Load()))
		return true
	})
	t.Logf("%d directory updates, %d webhooks, codes %v", updates.Load(), posted.Load(), summary)
	if problem != "" {
		t.Fatalf("a member whose files never changed was dropped by a directory read racing a kubelet update: %s", problem)
	}
}

// mutate returns the member's manifest with f applied to its decoded document.
func mutate(e poolEndpoint, f func(doc map[string]any)) []byte {
	var doc map[string]any
	if err := json.Unmarshal(e.manifest(), &doc); err != nil {
		panic(err)
	}
	f(doc)
	b, err := json.Marshal(doc)
	if err != nil {
		panic(err)
	}
	return b
}

func spec(doc map[string]any) map[string]any { return doc["spec"].(map[string]any) }

// Malformed and hostile members (bad JSON, wrong shapes, out-of-range values, a NAME
// that is no object name, a NAME.json naming another member, env files that are not
// KEY=VALUE, an unparsable or credential-bearing database URL, a huge file) never end
// the process, never take another member's route, are never routed themselves, are
// listed in /endpoints with an error that carries no credential, and leave a healthy
// member answering 200 throughout.
func TestPoolHostileMemberFiles(t *testing.T) {
	db := testsupport.MigratedDatabase(t, "shared")
	vol := newSecretVolume(t)
	vol.setMember(poolEndpoint{name: "steady", schema: "shared"}, db, "whsec_steady")
	p := startPool(t, vol.dir)
	if c := p.post(t, "/steady/", "whsec_steady"); c != http.StatusOK {
		t.Fatalf("steady: %d", c)
	}

	const pw = "s3cr3t-pa55word"
	secretURL := "postgres://postgres:" + pw + "@127.0.0.1:1/nowhere?sslmode=disable"
	const sigSecret = "whsec_topsecret_value"
	// member is what a member's files hold: NAME.json and NAME.env.
	type member struct {
		manifest []byte
		env      string
	}
	bad := map[string]member{}
	good := func(name string) poolEndpoint { return poolEndpoint{name: name, schema: "shared"} }
	envOK := "DATABASE_URL=" + db + "\nHOOKKEEPER_SIGNING_SECRET_0=" + sigSecret + "\n"
	bad["bad-json"] = member{[]byte(`{"apiVersion": "hookkeeper.dev/v1alpha1", "kind":`), envOK}
	for name, m := range map[string][]byte{
		"null-doc":  []byte(`null`),
		"array-doc": []byte(`[]`),
		"string":    []byte(`"steady"`),
		"impostor":  good("steady").manifest(), // NAME.json of impostor names steady
		"no-spec":   mutate(good("no-spec"), func(d map[string]any) { delete(d, "spec") }),
		"spec-null": mutate(good("spec-null"), func(d map[string]any) { d["spec"] = nil }),
		"path-rel": mutate(good("path-rel"), func(d map[string]any) {
			spec(d)["receiver"] = map[string]any{"path": "../steady/"}
		}),
		"path-empty": mutate(good("path-empty"), func(d map[string]any) { spec(d)["receiver"] = map[string]any{"path": ""} }),
		"maxconn-zero": mutate(good("maxconn-zero"), func(d map[string]any) {
			spec(d)["database"].(map[string]any)["maxConnections"] = 0
		}),
		"maxconn-huge": mutate(good("maxconn-huge"), func(d map[string]any) {
			spec(d)["database"].(map[string]any)["maxConnections"] = 1 << 40
		}),
		"inflight-neg": mutate(good("inflight-neg"), func(d map[string]any) {
			spec(d)["receiver"] = map[string]any{"path": "/", "maxInFlight": -5}
		}),
		"schema-inject": mutate(good("schema-inject"), func(d map[string]any) {
			spec(d)["database"].(map[string]any)["schema"] = `shared"; DROP TABLE shared.webhook_events; --`
		}),
		"no-provider": mutate(good("no-provider"), func(d map[string]any) { delete(spec(d), "provider") }),
		"no-secrets":  mutate(good("no-secrets"), func(d map[string]any) { delete(spec(d), "signingSecrets") }),
		"other-ns": mutate(good("other-ns"), func(d map[string]any) {
			d["metadata"].(map[string]any)["namespace"] = "kube-system"
		}),
	} {
		bad[name] = member{m, envOK}
	}
	bad["env-garbage"] = member{good("env-garbage").manifest(), "this is not an env file\n" + sigSecret + "\n"}
	bad["env-no-db"] = member{good("env-no-db").manifest(), "HOOKKEEPER_SIGNING_SECRET_0=" + sigSecret + "\n"}
	bad["env-bad-url"] = member{good("env-bad-url").manifest(), "DATABASE_URL=postgres://postgres:" + pw + "@[::1\nHOOKKEEPER_SIGNING_SECRET_0=" + sigSecret + "\n"}
	bad["env-dead-db"] = member{good("env-dead-db").manifest(), "DATABASE_URL=" + secretURL + "\nHOOKKEEPER_SIGNING_SECRET_0=" + sigSecret + "\n"}
	bad["env-crlf"] = member{good("env-crlf").manifest(), "DATABASE_URL=" + db + "\r\nHOOKKEEPER_SIGNING_SECRET_0=" + sigSecret + "\r\n"}
	bad["Upper"] = member{good("Upper").manifest(), envOK}
	bad["huge"] = member{mutate(good("huge"), func(d map[string]any) {
		d["metadata"].(map[string]any)["annotations"] = map[string]any{"pad": strings.Repeat("y", 8<<20)}
	}), envOK}

	for name, b := range bad {
		vol.files[name+".json"] = b.manifest
		vol.files[name+".env"] = []byte(b.env)
	}
	vol.publish()

	deadline := time.Now().Add(8 * time.Second)
	for time.Now().Before(deadline) {
		if c := p.post(t, "/steady/", "whsec_steady"); c != http.StatusOK {
			t.Fatalf("steady answered %d beside hostile members", c)
		}
		select {
		case <-p.Done():
			t.Fatal(p.Exited())
		case <-time.After(100 * time.Millisecond):
		}
	}
	eps := p.endpoints(t)
	if e := eps["steady"]; e.Key != "shop/steady" || e.Error != "" {
		t.Errorf("steady: %+v", e)
	}
	resp, err := http.Get(p.admin + "/endpoints")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	for _, s := range []string{pw, sigSecret, db} {
		if strings.Contains(string(raw), s) {
			t.Errorf("/endpoints carries a credential %q", s)
		}
	}
	for name := range bad {
		e, listed := eps[name]
		served := listed && e.Key != ""
		code, _ := p.postErr("/"+name+"/", sigSecret)
		t.Logf("%-14s listed=%v key=%q code=%d error=%q", name, listed, e.Key, code, e.Error)
		switch name {
		case "env-dead-db", "other-ns", "huge", "maxconn-zero", "path-empty":
			// Valid (zero values take their defaults; a dead database answers 503).
		default:
			if served || code == http.StatusOK {
				t.Errorf("%s is served (key %q, POST %d) though its files are broken", name, e.Key, code)
			}
			if listed && e.Error == "" {
				t.Errorf("%s listed without an error", name)
			}
		}
	}
	// A member whose NAME.json claims another namespace is recorded under that
	// namespace's key, in a pool that "serves only endpoints of its own namespace".
	if e := eps["other-ns"]; e.Key != "" && !strings.HasPrefix(e.Key, "shop/") {
		t.Logf("note: member other-ns serves under key %q", e.Key)
	}
	// steady's schema is intact.
	conn := connect(t, db)
	if n := count(t, conn, `SELECT count(*) FROM shared.webhook_events WHERE endpoint = 'shop/steady'`); n < 2 {
		t.Errorf("steady receipts: %d", n)
	}
	_ = os.Getpid
	_ = filepath.Join
	_ = fmt.Sprint
}

// rawRequest sends a request line with an exact (unnormalised) target and returns the
// status line's code.
func rawPost(t *testing.T, base, target, secret string) int {
	t.Helper()
	body := demo.StripeEvent(nextEventID(), "payment_intent.succeeded", "ord-raw", 100, time.Now())
	req, err := http.NewRequest(http.MethodPost, base+"/", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.URL.Opaque = target // sent verbatim as the request target
	code, err := sendSigned(req, body, secret)
	if err != nil {
		t.Fatalf("POST %s: %v", target, err)
	}
	return code
}

// Members named like a prefix of each other ("orders", "orders-eu") share one
// database and schema: a webhook signed with one's secret is refused by the other
// whatever the path variant, nothing is recorded under either; the same event id and
// entity key sent to both are two events, each recorded, moved and delivered under its
// own endpoint and to its own sink only.
func TestPoolPrefixNamesShareASchemaWithoutMixing(t *testing.T) {
	db := testsupport.MigratedDatabase(t, "shared")
	type delivery struct{ sink, key, body string }
	var mu sync.Mutex
	var got []delivery
	sink := func(name string) string {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			mu.Lock()
			got = append(got, delivery{name, r.Header.Get("Idempotency-Key"), string(b)})
			mu.Unlock()
			w.WriteHeader(http.StatusNoContent)
		}))
		t.Cleanup(s.Close)
		return s.URL
	}
	vol := newSecretVolume(t)
	vol.setMember(poolEndpoint{name: "orders", schema: "shared", path: "/", sinkURL: sink("orders")}, db, "whsec_orders")
	vol.setMember(poolEndpoint{name: "orders-eu", schema: "shared", path: "/stripe", sinkURL: sink("orders-eu")}, db, "whsec_orders_eu")
	p := startPool(t, vol.dir)
	conn := connect(t, db)
	total := func() int { return count(t, conn, `SELECT count(*) FROM shared.webhook_events`) }

	// Path variants, each signed with either secret.
	accepted := map[string]int{}
	for _, target := range []string{
		"/orders/", "/orders", "/orders//", "/Orders/", "/orders%2F", "/orders/.", "/orders/./",
		"/orders-eu/../orders/", "/orders-eu/stripe/../../orders/", "/orders-eu%2F..%2Forders/",
		"/orders-eu/%2e%2e/orders/", "//orders/", "/./orders/", "/orders-eu/stripe/",
		"/orders-eu/stripe", "/ORDERS-EU/stripe", "/orders-eu%2Fstripe", "/orders-eu/Stripe",
	} {
		// orders-eu's secret against anything that could reach orders, and the reverse.
		for _, secret := range []string{"whsec_orders_eu", "whsec_orders"} {
			if c := rawPost(t, p.webhook, target, secret); c == http.StatusOK {
				accepted[secret]++
				t.Logf("%s signed with %s: 200", target, secret)
			}
		}
	}
	// A 200 must mean a receipt under the endpoint whose secret signed it.
	perEndpoint := map[string]int{}
	rows, err := conn.Query(t.Context(), `SELECT endpoint, count(*) FROM shared.webhook_events GROUP BY endpoint`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var ep string
		var n int
		if err := rows.Scan(&ep, &n); err != nil {
			t.Fatal(err)
		}
		perEndpoint[ep] = n
	}
	rows.Close()
	t.Logf("receipts after the path variants: %v, accepted per secret %v", perEndpoint, accepted)
	if perEndpoint["shop/orders"] != accepted["whsec_orders"] || perEndpoint["shop/orders-eu"] != accepted["whsec_orders_eu"] {
		t.Errorf("receipts per endpoint %v do not match the requests each one's own secret signed %v", perEndpoint, accepted)
	}
	for ep := range perEndpoint {
		if ep != "shop/orders" && ep != "shop/orders-eu" {
			t.Errorf("a receipt under unexpected endpoint %q", ep)
		}
	}

	before := total()
	// The same event id and entity key to both, each with its own secret.
	if c := p.postEvent(t, "/orders/", "whsec_orders", "evt_same", "ord-same"); c != http.StatusOK {
		t.Fatalf("orders: %d", c)
	}
	if c := p.postEvent(t, "/orders-eu/stripe", "whsec_orders_eu", "evt_same", "ord-same"); c != http.StatusOK {
		t.Fatalf("orders-eu: %d", c)
	}
	// A copy to each is a duplicate of its own only.
	for _, c := range []int{
		p.postEvent(t, "/orders/", "whsec_orders", "evt_same", "ord-same"),
		p.postEvent(t, "/orders-eu/stripe", "whsec_orders_eu", "evt_same", "ord-same"),
	} {
		if c != http.StatusOK {
			t.Fatalf("duplicate: %d", c)
		}
	}
	// Cross-signed copies with the same id: refused, and nothing recorded.
	if c := p.postEvent(t, "/orders/", "whsec_orders_eu", "evt_cross", "ord-cross"); c != http.StatusUnauthorized {
		t.Errorf("orders with orders-eu's secret: %d, want 401", c)
	}
	if c := p.postEvent(t, "/orders-eu/stripe", "whsec_orders", "evt_cross", "ord-cross"); c != http.StatusUnauthorized {
		t.Errorf("orders-eu with orders' secret: %d, want 401", c)
	}
	if n := total() - before; n != 2 {
		t.Errorf("%d receipts written, want 2 (one per endpoint)", n)
	}
	for _, ep := range []string{"shop/orders", "shop/orders-eu"} {
		if n := count(t, conn, `SELECT count(*) FROM shared.webhook_events WHERE endpoint = $1 AND event_id LIKE '%evt_same%'`, ep); n != 1 {
			t.Errorf("%s: %d receipts of evt_same, want 1", ep, n)
		}
		if n := count(t, conn, `SELECT count(*) FROM shared.entities WHERE endpoint = $1 AND entity_key = 'ord-same' AND state = 'paid'`, ep); n != 1 {
			t.Errorf("%s: %d paid entities ord-same, want 1", ep, n)
		}
		if n := count(t, conn, `SELECT count(*) FROM shared.outbox WHERE endpoint = $1 AND entity_key = 'ord-same'`, ep); n != 1 {
			t.Errorf("%s: %d outbox rows for ord-same, want 1", ep, n)
		}
	}
	if n := count(t, conn, `SELECT count(*) FROM shared.webhook_events WHERE event_id LIKE '%evt_cross%'`); n != 0 {
		t.Errorf("cross-signed event recorded %d times", n)
	}
	// Each sink receives only its own endpoint's effect, with distinct keys.
	testsupport.Eventually(t, 20*time.Second, 50*time.Millisecond, "both ord-same effects delivered", func() error {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, d := range got {
			if strings.Contains(d.body, "ord-same") {
				n++
			}
		}
		if n < 2 {
			return fmt.Errorf("%d delivered", n)
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	keys := map[string]string{}
	for _, d := range got {
		if !strings.Contains(d.body, "ord-same") {
			continue
		}
		var doc map[string]any
		_ = json.Unmarshal([]byte(d.body), &doc)
		if prev, ok := keys[d.key]; ok && prev != d.sink {
			t.Errorf("idempotency key %q delivered to both %s and %s", d.key, prev, d.sink)
		}
		keys[d.key] = d.sink
		if ep, _ := doc["endpoint"].(string); ep != "" && ep != "shop/"+d.sink {
			t.Errorf("sink %s got an effect of %s: %s", d.sink, ep, d.body)
		}
	}
	sinks := map[string]int{}
	for _, s := range keys {
		sinks[s]++
	}
	if sinks["orders"] != 1 || sinks["orders-eu"] != 1 {
		t.Errorf("ord-same effects per sink: %v, want one each", sinks)
	}
}
