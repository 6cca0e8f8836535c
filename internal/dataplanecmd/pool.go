package dataplanecmd

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/metrics"
	"github.com/hookkeeper/hookkeeper/internal/outbox"
	"github.com/hookkeeper/hookkeeper/internal/periodic"
	"github.com/hookkeeper/hookkeeper/internal/receipt"
	"github.com/hookkeeper/hookkeeper/internal/receiver"
	"github.com/hookkeeper/hookkeeper/internal/store"
	"github.com/hookkeeper/hookkeeper/internal/version"
)

// Defaults of a receiver pool's flags.
const (
	DefaultEndpointsPoll     = 2 * time.Second
	DefaultHeartbeatInterval = 30 * time.Second
)

// PoolOptions are a receiver pool's wiring: `hookkeeper receiver --endpoints-dir DIR`.
type PoolOptions struct {
	// Dir holds NAME.json (the rendered WebhookEndpoint) and NAME.env (KEY=VALUE lines,
	// the variables a dedicated receiver pod gets) for every member endpoint.
	Dir string
	// Poll is how often Dir is read again (DefaultEndpointsPoll when zero).
	Poll time.Duration
	// Heartbeat is how often each endpoint checks its database and writes its
	// receiver_heartbeats row (DefaultHeartbeatInterval when zero).
	Heartbeat time.Duration
	// Pod and Pool name this process in the heartbeat rows.
	Pod, Pool string
	// Dispatcher, GroupCommit, MaxInFlight and RetentionInterval apply to every
	// endpoint as in ServeOptions.
	Dispatcher        bool
	GroupCommit       receipt.GroupCommit
	MaxInFlight       int
	RetentionInterval time.Duration
	// PoolMaxInFlight caps the requests the process handles at once, all endpoints
	// together (the pool's spec.maxInFlight); v1alpha1.DefaultMaxInFlight when zero.
	// One endpoint may hold at most half of them.
	PoolMaxInFlight int
	// WebhookAddr and AdminAddr are the listen addresses (host:port).
	WebhookAddr, AdminAddr string
	DrainDelay             time.Duration
	// ShutdownTimeout bounds the wait for in-flight requests, at shutdown and when a
	// changed or removed endpoint is drained.
	ShutdownTimeout time.Duration
	Log             logr.Logger
}

// ServePool serves every endpoint of o.Dir in this process until ctx ends: each on
// /NAME + its spec.receiver.path of one webhook port, each with its own database pool,
// in-flight limit and tasks (an endpointUnit). Dir is read again every o.Poll: an added
// endpoint starts, a changed one is built anew, swapped in and the old one drained, a
// removed one is drained; a configuration that does not compile leaves the previous
// version serving. /readyz holds once Dir was read and no endpoint's database is
// consulted; GET /endpoints on the admin port says what each endpoint does.
func ServePool(ctx context.Context, o PoolOptions) error {
	p, err := newEndpointPool(o)
	if err != nil {
		return err
	}
	srv, err := receiver.NewServer(receiver.ServerOptions{
		WebhookAddr:       o.WebhookAddr,
		AdminAddr:         o.AdminAddr,
		Webhook:           p,
		PerEndpointLimits: true,
		Ready:             p.ready,
		AdminHandlers:     map[string]http.Handler{"GET /endpoints": http.HandlerFunc(p.serveEndpoints)},
		Gatherer:          newGatherer(),
		Tasks:             []receiver.Task{{Name: "endpoints", Run: p.run}},
		DrainDelay:        o.DrainDelay,
		ShutdownTimeout:   o.ShutdownTimeout,
		Logger:            o.Log,
	})
	if err != nil {
		return err
	}
	o.Log.Info("starting receiver pool", "version", version.Get().String(), "dir", o.Dir, "pool", o.Pool, "pod", o.Pod, "gomaxprocs", runtime.GOMAXPROCS(0),
		"poll", p.o.Poll, "heartbeat", p.o.Heartbeat, "dispatcher", o.Dispatcher)
	return srv.Run(ctx)
}

// endpointPool routes webhooks to its endpoints' units and keeps the units in step with
// the directory.
type endpointPool struct {
	o PoolOptions
	// hashKey keys the digest of .env files in the published hash: random per process,
	// so the hash says a secret changed without being a digest anyone could test a guess
	// against.
	hashKey []byte
	// total is the pod's cap on requests in flight (PoolMaxInFlight), inside every
	// unit's own limit.
	total *receiver.TotalLimit
	// routes is the NAME -> unit table requests read; replaced whole on every change.
	routes atomic.Pointer[map[string]*endpointUnit]
	loaded atomic.Bool

	mu      sync.Mutex
	members map[string]*member
	// slots are each NAME's count of requests in flight. A removed member's stays until
	// its last version has drained (draining counts them), so a member removed and added
	// again meanwhile counts the old versions' requests too.
	slots    map[string]*receiver.Slots
	draining map[string]int
	// databases are what the endpoints of one database URL share (sharedDatabase).
	databases map[string]*sharedDatabase
	dirErr    string
	// drains are the units being drained.
	drains sync.WaitGroup
}

// member is what the pool knows of one NAME.
type member struct {
	unit        *endpointUnit
	fingerprint [32]byte // of the served files (never published)
	hash        string   // published hash of the served files
	servedSince time.Time
	dbURL       string
	secrets     []string // the served version's env values, removed from any error text
	// A newer version that failed to build, and why (credentials removed).
	failed    [32]byte
	failedErr string
}

// sharedDatabase is what the endpoints of one database URL share in a pool process,
// kept while one of their units is built or draining:
//   - gate bounds the connections being opened at once across their pools
//     (store.ConnectGate), so hundreds of endpoints loaded together queue for the
//     database instead of timing out;
//   - housekeeping is a small pool for their periodic work (unitOptions.Housekeeping),
//     whose sessions stay open between ticks;
//   - listener, with dispatchers, is the one LISTEN that wakes them all.
type sharedDatabase struct {
	gate         *store.ConnectGate
	housekeeping *pgxpool.Pool
	listener     *outbox.Listener
	stop         context.CancelFunc
	done         chan struct{}
	users        int
}

// The housekeeping pool of a database: enough sessions that one slow sweep does not
// hold up the heartbeats, kept open for as long as the ticks come; its ticks are spread
// over pooledStartSpread, so one or two sessions are busy at a time.
const (
	housekeepingConns    = 3
	housekeepingIdleTime = time.Minute
)

func newEndpointPool(o PoolOptions) (*endpointPool, error) {
	if o.Dir == "" {
		return nil, errors.New("--endpoints-dir is empty")
	}
	if o.Poll <= 0 {
		o.Poll = DefaultEndpointsPoll
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = DefaultHeartbeatInterval
	}
	if o.ShutdownTimeout <= 0 {
		o.ShutdownTimeout = receiver.DefaultShutdownTimeout
	}
	if o.PoolMaxInFlight <= 0 {
		o.PoolMaxInFlight = v1alpha1.DefaultMaxInFlight
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("hash key: %w", err)
	}
	p := &endpointPool{o: o, hashKey: key, members: map[string]*member{}, slots: map[string]*receiver.Slots{}, draining: map[string]int{},
		databases: map[string]*sharedDatabase{},
		total:     receiver.NewTotalLimit(o.PoolMaxInFlight, o.Log.WithName("webhook"))}
	p.routes.Store(&map[string]*endpointUnit{})
	return p, nil
}

// ServeHTTP routes /NAME/rest to NAME's unit as /rest (/NAME as /). An unknown NAME is
// a 404 before anything past the headers is read.
func (p *endpointPool) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name, rest := splitEndpointPath(r.URL.Path)
	// Twice: a request that found a unit just swapped out and draining takes the new one.
	for range 2 {
		u := (*p.routes.Load())[name]
		if u == nil {
			break
		}
		if !u.active.acquire() {
			continue
		}
		defer u.active.release()
		r2 := new(http.Request)
		*r2 = *r
		r2.URL = new(url.URL)
		*r2.URL = *r.URL
		r2.URL.Path, r2.URL.RawPath = rest, ""
		u.handler.ServeHTTP(w, r2)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	// The body is never read: close rather than drain it.
	h.Set("Connection", "close")
	w.WriteHeader(http.StatusNotFound)
	_, _ = w.Write([]byte("not found\n"))
}

// splitEndpointPath cuts "/NAME/rest" into NAME and "/rest", and "/NAME" into NAME and "/".
func splitEndpointPath(path string) (name, rest string) {
	path = strings.TrimPrefix(path, "/")
	name, rest, found := strings.Cut(path, "/")
	if !found {
		return name, "/"
	}
	return name, "/" + rest
}

// ready is /readyz beyond draining: the directory has been read once. No endpoint's
// database counts, so one endpoint's outage never takes the pool out of the Service.
func (p *endpointPool) ready(context.Context) error {
	if !p.loaded.Load() {
		return errors.New("endpoints directory not loaded yet")
	}
	return nil
}

// run keeps the units in step with the directory until ctx ends, then stops them all.
// Server runs it as a task: it ends after the webhook server has drained.
func (p *endpointPool) run(ctx context.Context) error {
	t := time.NewTicker(p.o.Poll)
	defer t.Stop()
	for {
		p.sync(ctx)
		select {
		case <-ctx.Done():
			p.stopAll()
			return nil
		case <-t.C:
		}
	}
}

// endpointFiles are the two files of one NAME; nil when absent.
type endpointFiles struct {
	manifest, env []byte
}

// errDirChanging: the kubelet replaced the Secret volume's ..data while it was read.
var errDirChanging = errors.New("the endpoints directory changed while it was read")

// readEndpointsDir reads the directory. A Secret volume is read through its ..data
// symlink, resolved once, so both files of a NAME come from one kubelet update; other
// entries starting with ".." are the kubelet's and skipped. The kubelet swaps ..data and
// then deletes the old data directory, so a read that overlaps an update can find files
// gone: such a read returns errDirChanging, never a directory missing those NAMEs
// (which would unroute and drain endpoints that did not change).
func readEndpointsDir(dir string) (map[string]*endpointFiles, error) {
	data := filepath.Join(dir, "..data")
	resolved, err := filepath.EvalSymlinks(data)
	volume := err == nil
	if volume {
		dir = resolved
	}
	files, err := readEndpointFiles(dir)
	if volume {
		if now, lerr := filepath.EvalSymlinks(data); lerr != nil || now != resolved {
			return nil, errDirChanging
		}
	}
	if err != nil {
		return nil, err
	}
	return files, nil
}

// readEndpointFiles reads every NAME.json and NAME.env of dir; an entry that cannot be
// read leaves its NAME incomplete.
func readEndpointFiles(dir string) (map[string]*endpointFiles, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read endpoints directory: %w", err)
	}
	out := map[string]*endpointFiles{}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, "..") {
			continue
		}
		base, isJSON := strings.CutSuffix(name, ".json")
		if !isJSON {
			var isEnv bool
			if base, isEnv = strings.CutSuffix(name, ".env"); !isEnv {
				continue
			}
		}
		path := filepath.Join(dir, name)
		// Stat and ReadFile follow symlinks; one that is broken mid-update leaves the
		// NAME incomplete until the next read.
		if info, err := os.Stat(path); err != nil || info.IsDir() {
			continue
		}
		data, err := os.ReadFile(path) //nolint:gosec // the operator's mounted directory
		if err != nil {
			continue
		}
		f := out[base]
		if f == nil {
			f = &endpointFiles{}
			out[base] = f
		}
		if isJSON {
			f.manifest = data
		} else {
			f.env = data
		}
	}
	return out, nil
}

// parseEnvFile reads KEY=VALUE lines; empty lines and lines starting with '#' are
// skipped, and a value keeps everything after the first '='. Errors give line numbers,
// never content.
func parseEnvFile(data []byte) (map[string]string, error) {
	env := map[string]string{}
	for i, line := range strings.Split(string(data), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("line %d of the .env file is not KEY=VALUE", i+1)
		}
		env[k] = v
	}
	return env, nil
}

// endpointName is what a member's NAME may be: a Kubernetes object name, which is also
// its path segment.
var endpointName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$`)

func fingerprint(f *endpointFiles) [32]byte {
	h := sha256.New()
	h.Write([]byte(strconv.Itoa(len(f.manifest))))
	h.Write([]byte{0})
	h.Write(f.manifest)
	h.Write(f.env)
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// publicHash is the hash /endpoints and the heartbeat publish: the SHA-256 of the
// manifest (the operator can compute it from what it rendered) and a digest of the
// .env under the process's random key (it changes when a secret does, and reveals
// nothing about the secret).
func (p *endpointPool) publicHash(f *endpointFiles) string {
	m := sha256.Sum256(f.manifest)
	mac := hmac.New(sha256.New, p.hashKey)
	mac.Write(f.env)
	return hex.EncodeToString(m[:8]) + "-" + hex.EncodeToString(mac.Sum(nil)[:4])
}

// sync reads the directory once and brings the units in step.
func (p *endpointPool) sync(ctx context.Context) {
	log := p.o.Log
	files, err := readEndpointsDir(p.o.Dir)
	// A read that overlapped a kubelet update is read again at once (an update is a
	// symlink swap, so the next read sees it whole); after a few, the next poll will.
	for try := 1; errors.Is(err, errDirChanging) && try < 3; try++ {
		files, err = readEndpointsDir(p.o.Dir)
	}
	if errors.Is(err, errDirChanging) {
		log.V(1).Info("the endpoints directory kept changing while read; reading it again at the next poll")
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		if msg := err.Error(); msg != p.dirErr {
			log.Error(err, "cannot read the endpoints directory; serving what was loaded before", "dir", p.o.Dir)
			p.dirErr = msg
		}
		return
	}
	p.dirErr = ""

	routes := *p.routes.Load()
	next := make(map[string]*endpointUnit, len(files))
	for name, u := range routes {
		next[name] = u
	}
	var retired []retiredUnit
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		f := files[name]
		if f.manifest == nil || f.env == nil {
			continue // not yet complete: keep what was there
		}
		m := p.members[name]
		if m == nil {
			m = &member{}
			p.members[name] = m
		}
		fp := fingerprint(f)
		if m.unit != nil && m.fingerprint == fp {
			m.failedErr, m.failed = "", [32]byte{}
			continue
		}
		if m.failedErr != "" && m.failed == fp {
			continue
		}
		began := time.Now()
		slots := p.slots[name]
		if slots == nil {
			slots = receiver.NewSlots(p.memberShare())
			p.slots[name] = slots
		}
		u, next2, err := p.build(ctx, name, f, slots)
		if err != nil {
			m.failed, m.failedErr = fp, err.Error()
			if m.unit != nil {
				log.Error(nil, "endpoint configuration not applied; the previous version keeps serving", "name", name, "error", m.failedErr)
			} else {
				log.Error(nil, "endpoint configuration not applied; the endpoint is not served", "name", name, "error", m.failedErr)
			}
			continue
		}
		old := m.unit
		slots.SetLimit(u.maxInFlight)
		m.unit, m.fingerprint, m.hash, m.servedSince = u, fp, next2.hash, time.Now()
		m.dbURL, m.secrets = next2.dbURL, next2.secrets
		m.failed, m.failedErr = [32]byte{}, ""
		u.start(ctx, p.heartbeat(name, u, m.hash))
		next[name] = u
		if old != nil {
			retired = append(retired, retiredUnit{name: name, unit: old})
			log.Info("endpoint changed: new version serving, draining the old one", "name", name, "endpoint", u.ep.Key(),
				"hash", m.hash, "took", time.Since(began).String())
		} else {
			log.Info("endpoint added", "name", name, "endpoint", u.ep.Key(), "path", "/"+name+u.ep.Spec.Receiver.Path,
				"hash", m.hash, "maxInFlight", u.maxInFlight, "maxConnections", u.ep.Spec.Database.MaxConnections,
				"took", time.Since(began).String())
		}
	}
	for name, m := range p.members {
		if _, ok := files[name]; ok {
			continue
		}
		delete(p.members, name)
		delete(next, name)
		if m.unit == nil {
			p.forgetSlots(name) // kept while an older version still drains (retire forgets it then)
		}
		if m.unit != nil {
			retired = append(retired, retiredUnit{name: name, unit: m.unit, removed: true})
			log.Info("endpoint removed: no longer routed, draining", "name", name, "endpoint", m.unit.ep.Key())
		}
	}
	p.routes.Store(&next)
	for _, r := range retired {
		p.retire(r)
	}
	if !p.loaded.Load() {
		p.loaded.Store(true)
		log.Info("endpoints directory loaded", "endpoints", len(next))
	}
}

type retiredUnit struct {
	name    string
	unit    *endpointUnit
	removed bool
}

// retire drains a unit no longer routed, in the background; callers hold p.mu.
func (p *endpointPool) retire(r retiredUnit) {
	p.draining[r.name]++
	p.drains.Go(func() {
		u := r.unit
		u.drain(p.o.ShutdownTimeout)
		if r.removed {
			// The endpoint may be served again by now (removed and re-added while this
			// version drained): its new version's metric series and heartbeat row are
			// then live, and forgetting them would blind its dashboards and make the
			// operator report it not loaded until the next heartbeat.
			p.mu.Lock()
			served := p.servesKey(u.ep.Key())
			if !served {
				metrics.Forget(u.ep.Key())
			}
			p.mu.Unlock()
			if !served {
				p.forgetHeartbeat(u)
			}
		}
		u.db.Close()
		p.mu.Lock()
		p.releaseDatabase(u.ep.DatabaseURL)
		if p.draining[r.name]--; p.draining[r.name] == 0 {
			delete(p.draining, r.name)
		}
		p.forgetSlots(r.name)
		p.mu.Unlock()
		u.log.Info("endpoint version drained", "name", r.name)
	})
}

// servesKey reports whether a member now serves the endpoint key; callers hold p.mu.
func (p *endpointPool) servesKey(key string) bool {
	for _, m := range p.members {
		if m.unit != nil && m.unit.ep.Key() == key {
			return true
		}
	}
	return false
}

// forgetSlots drops NAME's count once no member has that name and none of its versions
// still drains; callers hold p.mu.
func (p *endpointPool) forgetSlots(name string) {
	if p.members[name] == nil && p.draining[name] == 0 {
		delete(p.slots, name)
	}
}

// memberShare is the most of the pod's slots one member may hold: half, so one stuck or
// flooded member leaves the other half to the rest.
func (p *endpointPool) memberShare() int { return max(1, p.o.PoolMaxInFlight/2) }

// builtVersion is what the member keeps of a version that built.
type builtVersion struct {
	hash    string
	dbURL   string
	secrets []string
}

// build compiles and builds one endpoint's unit; callers hold p.mu. Its error has
// credentials removed.
func (p *endpointPool) build(ctx context.Context, name string, f *endpointFiles, slots *receiver.Slots) (*endpointUnit, builtVersion, error) {
	var v builtVersion
	if !endpointName.MatchString(name) {
		return nil, v, fmt.Errorf("%q is not an endpoint name (a Kubernetes object name)", name)
	}
	env, err := parseEnvFile(f.env)
	if err != nil {
		return nil, v, fmt.Errorf("%s.env: %w", name, err)
	}
	for _, val := range env {
		v.secrets = append(v.secrets, val)
	}
	v.dbURL = env[config.EnvDatabaseURL]
	fail := func(err error) (*endpointUnit, builtVersion, error) {
		return nil, v, errors.New(scrub(err.Error(), v.dbURL, v.secrets))
	}
	manifest := string(f.manifest)
	getenv := func(k string) string {
		if k == config.EnvEndpoint {
			return manifest
		}
		return env[k]
	}
	ep, err := config.Load("", getenv)
	if err != nil {
		return fail(fmt.Errorf("%s.json: %w", name, err))
	}
	if ep.Name != name {
		return fail(fmt.Errorf("%s.json holds endpoint %q, not %q", name, ep.Name, name))
	}
	db, err := p.acquireDatabase(ctx, ep.DatabaseURL)
	if err != nil {
		return fail(err)
	}
	u, err := newEndpointUnit(ctx, unitOptions{
		Endpoint:          ep,
		Getenv:            getenv,
		Dispatcher:        p.o.Dispatcher,
		GroupCommit:       p.o.GroupCommit,
		MaxInFlight:       p.o.MaxInFlight,
		MaxShare:          p.memberShare(),
		Slots:             slots,
		Total:             p.total,
		RetentionInterval: p.o.RetentionInterval,
		Pooled:            true,
		Listener:          db.listener,
		Gate:              db.gate,
		Housekeeping:      db.housekeeping,
		Log:               p.o.Log.WithValues("endpoint", ep.Key()),
	})
	if err != nil {
		p.releaseDatabase(ep.DatabaseURL)
		return fail(err)
	}
	v.hash = p.publicHash(f)
	return u, v, nil
}

// scrub removes credentials from msg: the database URL and its password (redact), and
// any value of the endpoint's .env long enough to be a secret.
func scrub(msg, dbURL string, secrets []string) string {
	msg = redact(msg, dbURL)
	for _, s := range secrets {
		if len(s) >= 6 {
			msg = strings.ReplaceAll(msg, s, "xxxxx")
		}
	}
	return msg
}

// acquireDatabase returns what the endpoints of dbURL share, building it for the first
// one: nothing connects until used. Callers hold p.mu.
func (p *endpointPool) acquireDatabase(ctx context.Context, dbURL string) (*sharedDatabase, error) {
	if db := p.databases[dbURL]; db != nil {
		db.users++
		return db, nil
	}
	db := &sharedDatabase{gate: store.NewConnectGate(store.DefaultConnectGate), users: 1}
	var err error
	db.housekeeping, err = store.NewPool(ctx, dbURL, store.PoolOptions{
		MaxConns:          housekeepingConns,
		MaxConnIdleTime:   housekeepingIdleTime,
		HealthCheckPeriod: pooledHealthInterval,
		Gate:              db.gate,
	})
	if err != nil {
		return nil, err
	}
	if p.o.Dispatcher {
		if db.listener, err = outbox.NewListener(dbURL, p.o.Log.WithName("listener")); err != nil {
			db.housekeeping.Close()
			return nil, err
		}
		lctx, stop := context.WithCancel(context.WithoutCancel(ctx))
		db.stop, db.done = stop, make(chan struct{})
		go func() {
			defer close(db.done)
			_ = db.listener.Run(lctx)
		}()
	}
	p.databases[dbURL] = db
	return db, nil
}

// releaseDatabase lets go of what dbURL's endpoints share with its last user, in the
// background; callers hold p.mu.
func (p *endpointPool) releaseDatabase(dbURL string) {
	db := p.databases[dbURL]
	if db == nil {
		return
	}
	if db.users--; db.users == 0 {
		delete(p.databases, dbURL)
		go db.close()
	}
}

// close stops the listener and closes the housekeeping pool, waiting for both.
func (db *sharedDatabase) close() {
	if db.stop != nil {
		db.stop()
		<-db.done
	}
	db.housekeeping.Close()
}

// stopAll drains every unit (the webhook server has finished its requests) and waits
// for them, then closes what their databases shared.
func (p *endpointPool) stopAll() {
	p.mu.Lock()
	for name, m := range p.members {
		if m.unit != nil {
			p.retire(retiredUnit{name: name, unit: m.unit})
		}
		delete(p.members, name)
	}
	p.routes.Store(&map[string]*endpointUnit{})
	p.mu.Unlock()
	p.drains.Wait()
	p.mu.Lock()
	databases := p.databases
	p.databases = map[string]*sharedDatabase{}
	p.mu.Unlock()
	for _, db := range databases {
		db.close()
	}
}

// endpointInfo is one entry of GET /endpoints.
type endpointInfo struct {
	Name string `json:"name"`
	// Key is "namespace/name"; empty while no version has been served.
	Key string `json:"key,omitempty"`
	// Hash identifies the served files (publicHash).
	Hash string `json:"hash,omitempty"`
	// Ready: the database answers and its schema is at this binary's version, as of
	// CheckedAt (the heartbeat's check).
	Ready bool `json:"ready"`
	// Error is what is wrong, credentials removed: the database, a failed task, or a
	// newer configuration that was not applied.
	Error       string     `json:"error,omitempty"`
	ServedSince *time.Time `json:"servedSince,omitempty"`
	CheckedAt   *time.Time `json:"checkedAt,omitempty"`
}

func (p *endpointPool) endpoints() []endpointInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]endpointInfo, 0, len(p.members))
	for name, m := range p.members {
		info := endpointInfo{Name: name, Hash: m.hash}
		var problems []string
		if u := m.unit; u != nil {
			info.Key = u.ep.Key()
			since := m.servedSince
			info.ServedSince = &since
			switch st := u.status.Load(); {
			case st == nil:
				problems = append(problems, "not checked yet")
			case st.err != nil:
				at := st.checkedAt
				info.CheckedAt = &at
				problems = append(problems, scrub(st.err.Error(), m.dbURL, m.secrets))
			default:
				at := st.checkedAt
				info.CheckedAt = &at
				info.Ready = true
			}
			if err := u.failedTasks(); err != nil {
				problems = append(problems, scrub(err.Error(), m.dbURL, m.secrets))
			}
		}
		if m.failedErr != "" {
			problems = append(problems, pendingPrefix(m)+m.failedErr)
		}
		info.Error = strings.Join(problems, "; ")
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b endpointInfo) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func pendingPrefix(m *member) string {
	if m.unit != nil {
		return "configuration not applied (the previous version serves): "
	}
	return "configuration not applied: "
}

func (p *endpointPool) serveEndpoints(w http.ResponseWriter, _ *http.Request) {
	body, err := json.MarshalIndent(p.endpoints(), "", "  ")
	if err != nil {
		http.Error(w, "encode endpoints", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(append(body, '\n'))
}

// heartbeatTimeout bounds one heartbeat's check and write.
const heartbeatTimeout = 5 * time.Second

// heartbeat is the task that, every heartbeat interval, checks the endpoint's database
// and upserts this pod's row in its receiver_heartbeats table: the operator, which
// reads the database anyway, learns from it which pods serve which version and how.
func (p *endpointPool) heartbeat(name string, u *endpointUnit, hash string) receiver.Task {
	return receiver.Task{Name: taskHeartbeat, Run: func(ctx context.Context) error {
		failing := false
		return periodic.Run(ctx, p.o.Heartbeat, func(ctx context.Context) (struct{}, error) {
			return struct{}{}, p.beat(ctx, name, u, hash)
		}, func(_ struct{}, err error) {
			switch {
			case err != nil && !failing:
				u.log.Info("heartbeat not written; retrying every interval", "error", err.Error(), "interval", p.o.Heartbeat)
				failing = true
			case err == nil && failing:
				u.log.Info("heartbeat written again")
				failing = false
			}
		})
	}}
}

func (p *endpointPool) beat(ctx context.Context, name string, u *endpointUnit, hash string) error {
	ctx, cancel := context.WithTimeout(ctx, heartbeatTimeout)
	defer cancel()
	readyErr := u.checkReady(ctx)
	p.mu.Lock()
	var problems []string
	var dbURL string
	var secrets []string
	m := p.members[name]
	if m == nil || m.unit != u {
		// A version swapped out or removed is draining: the row is the served version's
		// (its hash is the one the operator waits for) or, once the drain ends, gone.
		p.mu.Unlock()
		return nil
	}
	dbURL, secrets = m.dbURL, m.secrets
	if m.failedErr != "" {
		problems = append(problems, pendingPrefix(m)+m.failedErr)
	}
	p.mu.Unlock()
	if readyErr != nil {
		problems = append([]string{readyErr.Error()}, problems...)
	}
	if err := u.failedTasks(); err != nil {
		problems = append(problems, err.Error())
	}
	detail := scrub(strings.Join(problems, "; "), dbURL, secrets)
	_, err := u.housekeeping.Exec(ctx, `INSERT INTO `+u.ep.Tables.ReceiverHeartbeats+` AS h
		(endpoint, pod, pool, ready, detail, config_hash, seen_at) VALUES ($1, $2, $3, $4, $5, $6, now())
		ON CONFLICT (endpoint, pod) DO UPDATE SET pool = excluded.pool, ready = excluded.ready,
		detail = excluded.detail, config_hash = excluded.config_hash, seen_at = excluded.seen_at`,
		u.ep.Key(), p.o.Pod, p.o.Pool, readyErr == nil, detail, hash)
	if err != nil {
		return fmt.Errorf("write heartbeat: %s", scrub(err.Error(), dbURL, secrets))
	}
	return nil
}

// forgetHeartbeat removes this pod's row of an endpoint it no longer serves, best
// effort: a row left behind stops being refreshed, which says the same thing later.
func (p *endpointPool) forgetHeartbeat(u *endpointUnit) {
	ctx, cancel := context.WithTimeout(context.Background(), heartbeatTimeout)
	defer cancel()
	_, _ = u.housekeeping.Exec(ctx, `DELETE FROM `+u.ep.Tables.ReceiverHeartbeats+` WHERE endpoint = $1 AND pod = $2`, u.ep.Key(), p.o.Pod)
}
