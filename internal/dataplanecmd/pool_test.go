package dataplanecmd_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/demo"
	"github.com/hookkeeper/hookkeeper/internal/metrics"
	"github.com/hookkeeper/hookkeeper/internal/store"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func count(t *testing.T, conn *pgx.Conn, query string, args ...any) int {
	t.Helper()
	var n int
	if err := conn.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// Two endpoints in two databases (and schemas) served by one process, each on /NAME +
// its path; each one's signed webhook is recorded in its own schema and delivered to
// its own sink through the shared LISTEN; an unknown name is a 404; /endpoints and the
// heartbeat rows say both are ready.
func TestPoolServesEndpointsEachInItsOwnSchema(t *testing.T) {
	dbA := testsupport.MigratedDatabase(t, "alpha")
	dbB := testsupport.MigratedDatabase(t, "beta")
	var deliveredA, deliveredB atomic.Int32
	sink := func(n *atomic.Int32) string {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			n.Add(1)
			w.WriteHeader(http.StatusNoContent)
		}))
		t.Cleanup(s.Close)
		return s.URL
	}
	vol := newSecretVolume(t)
	vol.setMember(poolEndpoint{name: "payments", schema: "alpha", path: "/stripe", sinkURL: sink(&deliveredA)}, dbA, "whsec_alpha")
	vol.setMember(poolEndpoint{name: "refunds", schema: "beta", path: "/", sinkURL: sink(&deliveredB)}, dbB, "whsec_beta")
	p := startPool(t, vol.dir)

	if c := p.post(t, "/payments/stripe", "whsec_alpha"); c != http.StatusOK {
		t.Fatalf("/payments/stripe: %d, want 200", c)
	}
	for _, path := range []string{"/refunds/", "/refunds"} {
		if c := p.post(t, path, "whsec_beta"); c != http.StatusOK {
			t.Fatalf("%s: %d, want 200", path, c)
		}
	}
	// Each secret verifies only its own endpoint.
	if c := p.post(t, "/refunds/", "whsec_alpha"); c != http.StatusUnauthorized {
		t.Errorf("/refunds/ signed with payments' secret: %d, want 401", c)
	}
	for _, path := range []string{"/unknown/stripe", "/", "/payments/other"} {
		if c := p.post(t, path, "whsec_alpha"); c != http.StatusNotFound {
			t.Errorf("%s: %d, want 404", path, c)
		}
	}

	a, b := connect(t, dbA), connect(t, dbB)
	if n := count(t, a, `SELECT count(*) FROM alpha.webhook_events WHERE endpoint = 'shop/payments'`); n != 1 {
		t.Errorf("alpha receipts: %d, want 1", n)
	}
	if n := count(t, b, `SELECT count(*) FROM beta.webhook_events WHERE endpoint = 'shop/refunds'`); n != 2 {
		t.Errorf("beta receipts: %d, want 2", n)
	}
	testsupport.Eventually(t, 15*time.Second, 20*time.Millisecond, "both sinks to get their deliveries", func() error {
		if deliveredA.Load() < 1 || deliveredB.Load() < 2 {
			return fmt.Errorf("delivered %d to payments' sink, %d to refunds'", deliveredA.Load(), deliveredB.Load())
		}
		return nil
	})

	testsupport.Eventually(t, 10*time.Second, 50*time.Millisecond, "/endpoints to show both ready", func() error {
		eps := p.endpoints(t)
		for _, name := range []string{"payments", "refunds"} {
			if e := eps[name]; !e.Ready || e.Hash == "" || e.Key != "shop/"+name {
				return fmt.Errorf("%s: %+v", name, e)
			}
		}
		return nil
	})
	for _, hb := range []struct {
		conn     *pgx.Conn
		schema   string
		endpoint string
	}{{a, "alpha", "shop/payments"}, {b, "beta", "shop/refunds"}} {
		var pod, pool, hash string
		var ready bool
		err := hb.conn.QueryRow(context.Background(), `SELECT pod, pool, ready, config_hash FROM `+store.TablesIn(hb.schema).ReceiverHeartbeats+
			` WHERE endpoint = $1`, hb.endpoint).Scan(&pod, &pool, &ready, &hash)
		if err != nil || pod != "pool-pod-0" || pool != "shared" || !ready || hash != p.endpoints(t)[strings.TrimPrefix(hb.endpoint, "shop/")].Hash {
			t.Errorf("heartbeat of %s: pod %q pool %q ready %v hash %q (%v)", hb.endpoint, pod, pool, ready, hash, err)
		}
	}
	// The body of /endpoints never carries a secret.
	resp, err := http.Get(p.admin + "/endpoints")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	for _, secret := range []string{"whsec_alpha", "whsec_beta", dbA, dbB} {
		if strings.Contains(string(raw), secret) {
			t.Errorf("/endpoints shows a secret: %s", raw)
		}
	}
}

// A slow request: headers sent, the body held until release.
type slowRequest struct {
	code    chan int
	release func()
}

// startSlow sends a signed Stripe event to url whose body arrives only when released.
func startSlow(t *testing.T, url, secret string) *slowRequest {
	t.Helper()
	body := demo.StripeEvent(nextEventID(), "payment_intent.succeeded", "ord-slow", 100, time.Now())
	pr, pw := io.Pipe()
	req, err := http.NewRequest(http.MethodPost, url, pr)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = int64(len(body))
	req.Header.Set("Stripe-Signature", demo.StripeSignature(secret, body, time.Now()))
	s := &slowRequest{code: make(chan int, 1)}
	var once sync.Once
	s.release = func() {
		once.Do(func() {
			go func() {
				_, _ = pw.Write(body[1:])
				_ = pw.Close()
			}()
		})
	}
	t.Cleanup(s.release)
	go func() {
		resp, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
		if err != nil {
			s.code <- 0
			return
		}
		_ = resp.Body.Close()
		s.code <- resp.StatusCode
	}()
	go func() { _, _ = pw.Write(body[:1]) }()
	return s
}

func inFlight(endpoint string) float64 {
	return testutil.ToFloat64(metrics.InFlight.WithLabelValues(endpoint))
}

// Endpoints are added, changed (a signing secret rotated) and removed while another
// endpoint takes continuous traffic: that one never sees a non-2xx, the rotation takes
// effect within seconds, and a request in flight on the old version completes on it.
func TestPoolReloadsWithoutDisturbingOtherEndpoints(t *testing.T) {
	db := testsupport.MigratedDatabase(t, "shared")
	vol := newSecretVolume(t)
	vol.setMember(poolEndpoint{name: "steady", schema: "shared"}, db, "whsec_steady")
	vol.setMember(poolEndpoint{name: "rotating", schema: "shared"}, db, "whsec_old")
	p := startPool(t, vol.dir)

	// Continuous traffic to steady, four clients.
	stop := make(chan struct{})
	var sent, bad atomic.Int64
	var badMu sync.Mutex
	var badCodes []string
	var clients sync.WaitGroup
	for range 4 {
		clients.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, err := p.postErr("/steady/", "whsec_steady")
				sent.Add(1)
				if err != nil || c != http.StatusOK {
					bad.Add(1)
					badMu.Lock()
					badCodes = append(badCodes, fmt.Sprintf("%d %v", c, err))
					badMu.Unlock()
				}
			}
		})
	}
	var stopOnce sync.Once
	stopTraffic := func() {
		stopOnce.Do(func() { close(stop) })
		clients.Wait()
	}
	defer stopTraffic()

	// Add.
	began := time.Now()
	vol.setMember(poolEndpoint{name: "added", schema: "shared", path: "/in"}, db, "whsec_added")
	testsupport.Eventually(t, 10*time.Second, 20*time.Millisecond, "the added endpoint to answer", func() bool {
		c, err := p.postErr("/added/in", "whsec_added")
		return err == nil && c == http.StatusOK
	})
	t.Logf("added endpoint served after %s", time.Since(began).Round(time.Millisecond))

	// A request in flight on the old version of rotating: headers in, body held.
	slow := startSlow(t, p.webhook+"/rotating/", "whsec_old")
	testsupport.Eventually(t, 10*time.Second, 10*time.Millisecond, "the slow request to be in flight", func() bool {
		return inFlight("shop/rotating") == 1
	})
	hashBefore := p.endpoints(t)["rotating"].Hash

	// Rotate: the new secret replaces the old.
	began = time.Now()
	vol.setMember(poolEndpoint{name: "rotating", schema: "shared"}, db, "whsec_new")
	testsupport.Eventually(t, 10*time.Second, 10*time.Millisecond, "the new secret to verify", func() bool {
		c, err := p.postErr("/rotating/", "whsec_new")
		return err == nil && c == http.StatusOK
	})
	switched := time.Since(began)
	t.Logf("secret rotation took effect after %s (poll interval 100ms)", switched.Round(time.Millisecond))
	if c := p.post(t, "/rotating/", "whsec_old"); c != http.StatusUnauthorized {
		t.Errorf("the old secret after the rotation: %d, want 401", c)
	}
	if h := p.endpoints(t)["rotating"].Hash; h == hashBefore || h == "" {
		t.Errorf("hash after the rotation %q, before %q: want a new one", h, hashBefore)
	}
	// The old version still holds the slow request; it completes, verified by the old
	// secret, and is recorded.
	select {
	case c := <-slow.code:
		t.Fatalf("the in-flight request ended before its body was sent: %d", c)
	default:
	}
	slow.release()
	select {
	case c := <-slow.code:
		if c != http.StatusOK {
			t.Errorf("the request in flight during the rotation: %d, want 200 (completed on the old version)", c)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the in-flight request never completed")
	}

	// Remove.
	began = time.Now()
	vol.remove("added")
	testsupport.Eventually(t, 10*time.Second, 20*time.Millisecond, "the removed endpoint to be a 404", func() bool {
		c, err := p.postErr("/added/in", "whsec_added")
		return err == nil && c == http.StatusNotFound
	})
	t.Logf("removed endpoint unrouted after %s", time.Since(began).Round(time.Millisecond))
	if _, ok := p.endpoints(t)["added"]; ok {
		t.Error("/endpoints still lists the removed endpoint")
	}

	// An incomplete update (the .json without its .env) changes nothing.
	vol.set("halfway", poolEndpoint{name: "halfway", schema: "shared"}.manifest(), nil)
	testsupport.Eventually(t, 5*time.Second, 50*time.Millisecond, "steady traffic to have gone on", func() bool {
		return sent.Load() > 50
	})
	if _, ok := p.endpoints(t)["halfway"]; ok {
		t.Error("an endpoint without its .env file is served")
	}

	stopTraffic()
	t.Logf("steady endpoint: %d requests during the changes, %d not 2xx", sent.Load(), bad.Load())
	if bad.Load() != 0 {
		t.Errorf("the steady endpoint answered %d of %d requests with other than 200: %v", bad.Load(), sent.Load(), badCodes[:min(len(badCodes), 5)])
	}
	conn := connect(t, db)
	if n := count(t, conn, `SELECT count(*) FROM shared.receiver_heartbeats WHERE endpoint = 'shop/added'`); n != 0 {
		t.Errorf("the removed endpoint's heartbeat row is still there")
	}
}

// blockDatabase makes url's database refuse connections and ends its sessions, as
// internal/receiver's blockConnections does; the returned function restores it.
func blockDatabase(t *testing.T, url string) func() {
	t.Helper()
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	srv := connect(t, testsupport.ServerURL(t))
	ident := pgx.Identifier{cfg.Database}.Sanitize()
	if _, err := srv.Exec(ctx, "ALTER DATABASE "+ident+" WITH ALLOW_CONNECTIONS false"); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`, cfg.Database); err != nil {
		t.Fatal(err)
	}
	restored := false
	restore := func() {
		if !restored {
			restored = true
			_, _ = srv.Exec(ctx, "ALTER DATABASE "+ident+" WITH ALLOW_CONNECTIONS true")
		}
	}
	t.Cleanup(restore)
	return restore
}

// One endpoint's dead database, flood and broken configuration touch no other: B
// keeps answering 200 quickly while A's database is unreachable, A's requests beyond
// its maxInFlight get 503 while B's do not, and a configuration of A that does not
// compile leaves A's previous version serving and shows in /endpoints.
func TestPoolIsolatesEndpoints(t *testing.T) {
	dbA := testsupport.MigratedDatabase(t, "hookkeeper")
	dbB := testsupport.MigratedDatabase(t, "hookkeeper")
	vol := newSecretVolume(t)
	epA := poolEndpoint{name: "a", schema: "hookkeeper", maxInFlight: 2}
	vol.setMember(epA, dbA, "whsec_a")
	vol.setMember(poolEndpoint{name: "b", schema: "hookkeeper"}, dbB, "whsec_b")
	p := startPool(t, vol.dir)
	for _, name := range []string{"a", "b"} {
		if c := p.post(t, "/"+name+"/", "whsec_"+name); c != http.StatusOK {
			t.Fatalf("warm-up of %s: %d", name, c)
		}
	}

	// A's database goes away.
	restore := blockDatabase(t, dbA)
	if c := p.post(t, "/a/", "whsec_a"); c != http.StatusServiceUnavailable {
		t.Errorf("A with its database down: %d, want 503", c)
	}
	var slowest time.Duration
	for range 50 {
		began := time.Now()
		if c := p.post(t, "/b/", "whsec_b"); c != http.StatusOK {
			t.Fatalf("B while A's database is down: %d, want 200", c)
		}
		slowest = max(slowest, time.Since(began))
	}
	t.Logf("B's slowest of 50 requests while A's database is down: %s", slowest.Round(time.Millisecond))
	if slowest > time.Second {
		t.Errorf("B's slowest request took %s while A's database was down", slowest)
	}
	if r, err := http.Get(p.admin + "/readyz"); err != nil {
		t.Errorf("/readyz with one endpoint's database down: %v, want 200", err)
	} else {
		_ = r.Body.Close()
		if r.StatusCode != http.StatusOK {
			t.Errorf("/readyz with one endpoint's database down: %d, want 200", r.StatusCode)
		}
	}
	testsupport.Eventually(t, 10*time.Second, 50*time.Millisecond, "/endpoints to show A not ready and B ready", func() error {
		eps := p.endpoints(t)
		if eps["a"].Ready || !strings.Contains(eps["a"].Error, "database unreachable") || !eps["b"].Ready {
			return fmt.Errorf("a %+v, b %+v", eps["a"], eps["b"])
		}
		if strings.Contains(eps["a"].Error, dbA) {
			return testsupport.Final(fmt.Errorf("A's error shows its URL: %s", eps["a"].Error))
		}
		return nil
	})
	restore()
	// Sessions the outage ended fail once each; the provider's retry then succeeds.
	testsupport.Eventually(t, 10*time.Second, 50*time.Millisecond, "A to answer 200 again", func() bool {
		c, err := p.postErr("/a/", "whsec_a")
		return err == nil && c == http.StatusOK
	})

	// A's flood: its two slots held by slow requests, the third is refused; B is not.
	s1, s2 := startSlow(t, p.webhook+"/a/", "whsec_a"), startSlow(t, p.webhook+"/a/", "whsec_a")
	testsupport.Eventually(t, 10*time.Second, 10*time.Millisecond, "A's slots to be taken", func() bool {
		return inFlight("shop/a") == 2
	})
	resp, err := postClient.Post(p.webhook+"/a/", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("A beyond its maxInFlight: %d Retry-After %q, want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	for range 10 {
		if c := p.post(t, "/b/", "whsec_b"); c != http.StatusOK {
			t.Fatalf("B while A is flooded: %d, want 200", c)
		}
	}
	s1.release()
	s2.release()
	for _, s := range []*slowRequest{s1, s2} {
		if c := <-s.code; c != http.StatusOK {
			t.Errorf("A's slow request: %d, want 200 (the database is back)", c)
		}
	}

	// A bad configuration of A: a CEL expression that does not compile.
	bad := epA
	bad.entityKey = "body.data.(("
	vol.setMember(bad, dbA, "whsec_a2")
	testsupport.Eventually(t, 10*time.Second, 50*time.Millisecond, "A's error in /endpoints", func() error {
		if e := p.endpoints(t)["a"]; !strings.Contains(e.Error, "configuration not applied (the previous version serves)") {
			return fmt.Errorf("a: %+v", e)
		}
		return nil
	})
	t.Logf("A's error in /endpoints: %s", p.endpoints(t)["a"].Error)
	if c := p.post(t, "/a/", "whsec_a"); c != http.StatusOK {
		t.Errorf("A's previous version after a bad update: %d, want 200", c)
	}
	if c := p.post(t, "/b/", "whsec_b"); c != http.StatusOK {
		t.Errorf("B after A's bad update: %d, want 200", c)
	}
	conn := connect(t, dbA)
	testsupport.Eventually(t, 10*time.Second, 50*time.Millisecond, "A's heartbeat to carry the error", func() bool {
		return count(t, conn, `SELECT count(*) FROM hookkeeper.receiver_heartbeats WHERE endpoint = 'shop/a' AND detail LIKE '%configuration not applied%'`) == 1
	})
	// An endpoint that never compiled is listed with its error and not served.
	badC := bad
	badC.name = "c"
	vol.setMember(badC, dbA, "whsec_c")
	testsupport.Eventually(t, 10*time.Second, 50*time.Millisecond, "C's error in /endpoints", func() bool {
		e, ok := p.endpoints(t)["c"]
		return ok && strings.HasPrefix(e.Error, "configuration not applied: ")
	})
	if c := p.post(t, "/c/", "whsec_c"); c != http.StatusNotFound {
		t.Errorf("an endpoint that never compiled: %d, want 404", c)
	}
}

func TestPoolRefusesAnEndpointBesideTheDirectory(t *testing.T) {
	err := receiverCommand("--endpoints-dir", t.TempDir(), "--endpoint", "x.yaml")(context.Background())
	if err == nil || !strings.Contains(err.Error(), "cannot be combined") {
		t.Errorf("--endpoints-dir with --endpoint: %v, want a refusal", err)
	}
	t.Setenv(config.EnvEndpoint, "{}")
	err = receiverCommand("--endpoints-dir", t.TempDir())(context.Background())
	if err == nil || !strings.Contains(err.Error(), config.EnvEndpoint) {
		t.Errorf("--endpoints-dir with $%s: %v, want a refusal", config.EnvEndpoint, err)
	}
}

// A pool pod caps the requests of all its endpoints together (the pool's
// spec.maxInFlight, --pool-max-in-flight): each endpoint's own maxInFlight alone let a
// pod hold members × maxInFlight bodies, so anyone could hold nearly complete bodies
// open on a few members until the pod ran out of memory and every member went down.
// One member gets at most half of the slots, and the pod's cap is asked only once the
// member's own limit admitted a request, so one stuck or flooded member cannot starve
// the others. Beyond either limit a request gets 503 with Retry-After before its
// body is read; once the held requests end, the members are served again.
func TestPoolCapsRequestsOfAllEndpointsTogether(t *testing.T) {
	db := testsupport.MigratedDatabase(t, "shared")
	vol := newSecretVolume(t)
	for _, m := range []string{"mem-a", "mem-b", "mem-c"} {
		vol.setMember(poolEndpoint{name: m, schema: "shared"}, db, "whsec_"+m)
	}
	p := startPool(t, vol.dir, "--pool-max-in-flight", "4")
	if c := p.post(t, "/mem-c/", "whsec_mem-c"); c != http.StatusOK {
		t.Fatalf("/mem-c/ before any load: %d, want 200", c)
	}

	// Requests that announce a body and never finish it.
	var writers []*io.PipeWriter
	done := make(chan struct{}, 4)
	held := map[string]int{}
	holdOn := func(member string) {
		pr, pw := io.Pipe()
		writers = append(writers, pw)
		req, err := http.NewRequest(http.MethodPost, p.webhook+"/"+member+"/", pr)
		must(t, err)
		req.ContentLength = 1 << 10
		go func() {
			if resp, err := (&http.Client{}).Do(req); err == nil {
				_ = resp.Body.Close()
			}
			done <- struct{}{}
		}()
		go func() { _, _ = pw.Write([]byte("{")) }()
		held[member]++
		want := float64(held[member])
		testsupport.Eventually(t, 10*time.Second, 10*time.Millisecond, "held requests to "+member, func() bool {
			return testutil.ToFloat64(metrics.InFlight.WithLabelValues("shop/"+member)) == want
		})
	}
	// mem-a holds its share, half of the 4 slots: its next request is refused, mem-b is
	// still served.
	holdOn("mem-a")
	holdOn("mem-a")
	if status, err := p.postErr("/mem-a/", "whsec_mem-a"); err != nil || status != http.StatusServiceUnavailable {
		t.Errorf("/mem-a/ beyond its half of the pool's slots: %d %v, want 503", status, err)
	}
	if c := p.post(t, "/mem-b/", "whsec_mem-b"); c != http.StatusOK {
		t.Errorf("/mem-b/ while mem-a holds its share: %d, want 200", c)
	}
	// A new version of mem-a (a rotated secret) shares its count: the two requests still
	// held on the version being drained leave the new one no slot, so a member never
	// holds more than its share, not even while its configuration changes.
	hashBefore := p.endpoints(t)["mem-a"].Hash
	vol.setMember(poolEndpoint{name: "mem-a", schema: "shared"}, db, "whsec_mem-a-rotated")
	testsupport.Eventually(t, 10*time.Second, 20*time.Millisecond, "mem-a's new version to serve", func() bool {
		return p.endpoints(t)["mem-a"].Hash != hashBefore
	})
	ownBefore := testutil.ToFloat64(metrics.Overloaded.WithLabelValues("shop/mem-a"))
	if status, err := p.postErr("/mem-a/", "whsec_mem-a-rotated"); err != nil || status != http.StatusServiceUnavailable {
		t.Errorf("/mem-a/ on its new version while the old one holds its share: %d %v, want 503", status, err)
	}
	if own := testutil.ToFloat64(metrics.Overloaded.WithLabelValues("shop/mem-a")) - ownBefore; own != 1 {
		t.Errorf("refused by mem-a's own limit %v times, want 1", own)
	}
	// So does a member removed and added again while its old version drains.
	vol.remove("mem-a")
	testsupport.Eventually(t, 10*time.Second, 20*time.Millisecond, "mem-a to be removed", func() bool {
		_, listed := p.endpoints(t)["mem-a"]
		return !listed
	})
	vol.setMember(poolEndpoint{name: "mem-a", schema: "shared"}, db, "whsec_mem-a-readded")
	testsupport.Eventually(t, 10*time.Second, 20*time.Millisecond, "mem-a to be served again", func() bool {
		return p.endpoints(t)["mem-a"].Key != ""
	})
	if status, err := p.postErr("/mem-a/", "whsec_mem-a-readded"); err != nil || status != http.StatusServiceUnavailable {
		t.Errorf("/mem-a/ added again while its removed version holds its share: %d %v, want 503", status, err)
	}
	// mem-b holds the other two: the pod is full, and mem-c is refused by the pool's cap.
	holdOn("mem-b")
	holdOn("mem-b")
	refusedBefore := testutil.ToFloat64(metrics.PoolOverloaded)
	if status, err := p.postErr("/mem-c/", "whsec_mem-c"); err != nil || status != http.StatusServiceUnavailable {
		t.Errorf("/mem-c/ with the pool's 4 slots held: %d %v, want 503", status, err)
	}
	if got := testutil.ToFloat64(metrics.PoolOverloaded) - refusedBefore; got != 1 {
		t.Errorf("hookkeeper_receiver_pool_overloaded_total rose by %v, want 1", got)
	}
	// A request beyond mem-a's share is refused by mem-a's own limit, never by the pod's:
	// it takes none of the pod's slots, so a member flooded far beyond its share (a
	// stuck database, say) cannot crowd the others out while its extra requests are
	// being refused.
	refusedBefore = testutil.ToFloat64(metrics.PoolOverloaded)
	ownBefore = testutil.ToFloat64(metrics.Overloaded.WithLabelValues("shop/mem-a"))
	if status, err := p.postErr("/mem-a/", "whsec_mem-a"); err != nil || status != http.StatusServiceUnavailable {
		t.Errorf("/mem-a/ beyond its share with the pod full: %d %v, want 503", status, err)
	}
	if pod, own := testutil.ToFloat64(metrics.PoolOverloaded)-refusedBefore,
		testutil.ToFloat64(metrics.Overloaded.WithLabelValues("shop/mem-a"))-ownBefore; pod != 0 || own != 1 {
		t.Errorf("refused by the pod %v times and by mem-a's own limit %v times, want 0 and 1", pod, own)
	}

	for _, w := range writers {
		_ = w.CloseWithError(io.ErrUnexpectedEOF)
	}
	for range writers {
		if err := testsupport.Await(t, chanErr(done), 10*time.Second, "a held request to end"); err != nil {
			t.Fatal(err)
		}
	}
	testsupport.Eventually(t, 10*time.Second, 20*time.Millisecond, "mem-c served once the slots are free", func() bool {
		return p.post(t, "/mem-c/", "whsec_mem-c") == http.StatusOK
	})
}

// chanErr turns a done signal into what testsupport.Await waits on.
func chanErr(done <-chan struct{}) <-chan error {
	out := make(chan error, 1)
	go func() {
		<-done
		out <- nil
	}()
	return out
}
