package dataplanecmd_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/demo"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// secretVolume writes a directory the way the kubelet writes a Secret volume: every
// update is a new hidden ..<timestamp> directory, the ..data symlink is swapped to it
// atomically, and each visible file is a symlink through ..data.
type secretVolume struct {
	t     testing.TB
	dir   string
	files map[string][]byte
	n     int
}

func newSecretVolume(t testing.TB) *secretVolume {
	return &secretVolume{t: t, dir: t.TempDir(), files: map[string][]byte{}}
}

// set replaces the files of endpoint name (nil env or manifest: that file is absent)
// in one atomic update.
func (v *secretVolume) set(name string, manifest []byte, env map[string]string) {
	v.t.Helper()
	delete(v.files, name+".json")
	delete(v.files, name+".env")
	if manifest != nil {
		v.files[name+".json"] = manifest
	}
	if env != nil {
		var b strings.Builder
		b.WriteString("# written by the test\n\n")
		for _, k := range slices.Sorted(maps.Keys(env)) {
			b.WriteString(k + "=" + env[k] + "\n")
		}
		v.files[name+".env"] = []byte(b.String())
	}
	v.publish()
}

// setMember publishes e as a pool member: its manifest, and an env file with dbURL and
// the signing secret (poolEnv).
func (v *secretVolume) setMember(e poolEndpoint, dbURL, secret string) {
	v.t.Helper()
	v.set(e.name, e.manifest(), poolEnv(dbURL, secret))
}

func (v *secretVolume) remove(name string) { v.set(name, nil, nil) }

func (v *secretVolume) publish() {
	v.t.Helper()
	v.n++
	ts := fmt.Sprintf("..2026_01_01_00_00_%02d.%d", v.n%60, v.n)
	tsDir := filepath.Join(v.dir, ts)
	must(v.t, os.Mkdir(tsDir, 0o700))
	for name, data := range v.files {
		must(v.t, os.WriteFile(filepath.Join(tsDir, name), data, 0o600))
	}
	old, _ := os.Readlink(filepath.Join(v.dir, "..data"))
	tmp := filepath.Join(v.dir, "..data_tmp")
	must(v.t, os.Symlink(ts, tmp))
	must(v.t, os.Rename(tmp, filepath.Join(v.dir, "..data")))
	entries, err := os.ReadDir(v.dir)
	must(v.t, err)
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "..") {
			if _, keep := v.files[e.Name()]; !keep {
				must(v.t, os.Remove(filepath.Join(v.dir, e.Name())))
			}
		}
	}
	for name := range v.files {
		link := filepath.Join(v.dir, name)
		if _, err := os.Lstat(link); err != nil {
			must(v.t, os.Symlink(filepath.Join("..data", name), link))
		}
	}
	if old != "" {
		must(v.t, os.RemoveAll(filepath.Join(v.dir, old)))
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// poolEndpoint is the rendered WebhookEndpoint (JSON) of a pool member: Stripe, as
// testsupport's shared endpoint, in namespace shop.
type poolEndpoint struct {
	name, schema, path, sinkURL string
	maxInFlight                 int
	// entityKey is the CEL of spec.event.entityKey (a broken one makes a bad config).
	entityKey string
}

func (e poolEndpoint) manifest() []byte {
	if e.path == "" {
		e.path = "/"
	}
	if e.entityKey == "" {
		e.entityKey = "body.data.object.metadata.client_txn_id"
	}
	if e.sinkURL == "" {
		e.sinkURL = "http://127.0.0.1:1/unused"
	}
	receiver := map[string]any{"path": e.path}
	if e.maxInFlight > 0 {
		receiver["maxInFlight"] = e.maxInFlight
	}
	doc := map[string]any{
		"apiVersion": "hookkeeper.dev/v1alpha1", "kind": "WebhookEndpoint",
		"metadata": map[string]any{"name": e.name, "namespace": "shop"},
		"spec": map[string]any{
			"provider":       map[string]any{"type": "Stripe"},
			"signingSecrets": []any{map[string]any{"secretKeyRef": map[string]any{"name": "stripe", "key": "current"}}},
			"event":          map[string]any{"entityKey": e.entityKey},
			"database": map[string]any{
				"urlSecretRef": map[string]any{"name": "db", "key": "uri"}, "schema": e.schema, "maxConnections": 4,
			},
			"entity": map[string]any{"onUnmatched": "Create"},
			"stateMachine": map[string]any{
				"initial": "payment_pending", "states": []string{"payment_pending", "paid"},
				"transitions": []any{map[string]any{
					"name": "capture", "on": []string{"payment_intent.succeeded"},
					"from": []string{"payment_pending"}, "to": "paid", "emit": "order.paid",
				}},
			},
			"delivery": map[string]any{"sink": map[string]any{"url": e.sinkURL},
				"backoff": map[string]any{"initial": "100ms", "max": "1s"}},
			"receiver": receiver,
		},
	}
	b, err := json.Marshal(doc)
	if err != nil {
		panic(err)
	}
	return b
}

func poolEnv(dbURL, secret string) map[string]string {
	return map[string]string{config.EnvDatabaseURL: dbURL, config.EnvSigningSecretPrefix + "0": secret}
}

// runningPool is `hookkeeper receiver --endpoints-dir` running in this process.
type runningPool struct {
	webhook, admin string
	*testsupport.Running
}

func startPool(t *testing.T, dir string, extra ...string) *runningPool {
	t.Helper()
	p := &runningPool{webhook: "http://" + testsupport.FreeAddr(t), admin: "http://" + testsupport.FreeAddr(t)}
	args := append([]string{"--endpoints-dir", dir,
		"--listen-address", strings.TrimPrefix(p.webhook, "http://"), "--admin-address", strings.TrimPrefix(p.admin, "http://"),
		"--log-level", "error", "--endpoints-poll", "100ms", "--heartbeat-interval", "200ms",
		"--pod-name", "pool-pod-0", "--pool", "shared", "--shutdown-timeout", "10s"}, extra...)
	p.Running = testsupport.Run(t, context.Background(), "pool", 30*time.Second, receiverCommand(args...))
	t.Cleanup(func() {
		if err := p.Stop(t); err != nil {
			t.Errorf("pool stopped with %v", err)
		}
	})
	testsupport.WaitReady(t, p.admin+"/readyz", 20*time.Second, p.Exited)
	return p
}

var postClient = &http.Client{Timeout: 15 * time.Second}

// post sends a signed Stripe event with a fresh id to path and returns the status.
func (p *runningPool) post(t testing.TB, path, secret string) int {
	t.Helper()
	id := nextEventID()
	return p.postEvent(t, path, secret, id, "ord-"+id)
}

// postEvent sends a Stripe event with the given id and entity to path, signed with
// secret, and returns the status.
func (p *runningPool) postEvent(t testing.TB, path, secret, id, entity string) int {
	t.Helper()
	code, err := postStripeEvent(p.webhook+path, secret, id, entity)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	return code
}

var eventSeq struct {
	sync.Mutex
	n int
}

func nextEventID() string {
	eventSeq.Lock()
	defer eventSeq.Unlock()
	eventSeq.n++
	return "evt_pool_" + strconv.Itoa(eventSeq.n) + "_" + strconv.FormatInt(time.Now().UnixNano(), 36)
}

func (p *runningPool) postErr(path, secret string) (int, error) {
	id := nextEventID()
	return postStripeEvent(p.webhook+path, secret, id, "ord-"+id)
}

// postStripeEvent sends a payment_intent.succeeded event with the given id and entity
// to url, signed with secret, and returns the status.
func postStripeEvent(url, secret, id, entity string) (int, error) {
	body := demo.StripeEvent(id, "payment_intent.succeeded", entity, 100, time.Now())
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(string(body)))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	return sendSigned(req, body, secret)
}

// sendSigned sends req, whose body is body, with body's Stripe-Signature for secret,
// and returns the status; the response body is read to the end, so the connection is
// reused.
func sendSigned(req *http.Request, body []byte, secret string) (int, error) {
	req.Header.Set("Stripe-Signature", demo.StripeSignature(secret, body, time.Now()))
	resp, err := postClient.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// scrapeMetrics returns the /metrics text of the admin port at adminURL
// ("http://host:port").
func scrapeMetrics(t *testing.T, adminURL string) string {
	t.Helper()
	text, err := testsupport.Metrics(adminURL)
	if err != nil {
		t.Fatal(err)
	}
	return text
}

type endpointStatus struct {
	Name, Key, Hash, Error string
	Ready                  bool
	ServedSince            *time.Time
}

func (p *runningPool) endpoints(t testing.TB) map[string]endpointStatus {
	t.Helper()
	resp, err := http.Get(p.admin + "/endpoints")
	if err != nil {
		t.Fatalf("GET /endpoints: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	var list []endpointStatus
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatalf("decode /endpoints: %v", err)
	}
	out := map[string]endpointStatus{}
	for _, e := range list {
		out[e.Name] = e
	}
	return out
}
