package dataplanecmd_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/dataplanecmd"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// poolScaleEnv lists the endpoint counts TestPoolIdleEndpointsScale measures
// ("1,10,50,200"); the test is skipped without it.
const poolScaleEnv = "HOOKKEEPER_POOL_SCALE"

// TestPoolIdleEndpointsScale measures what idle endpoints cost a receiver pool: for each
// count, a pool process of its own serves that many endpoints of one database (one
// schema, so setup stays quick), and the test prints its resident memory, goroutines
// and the database sessions it holds once all are ready, and again after the idle
// connections have had time to close. HOOKKEEPER_POOL_SCALE=1,10,50,200 go test
// ./internal/dataplanecmd -run TestPoolIdleEndpointsScale -v
func TestPoolIdleEndpointsScale(t *testing.T) {
	spec := os.Getenv(poolScaleEnv)
	if spec == "" {
		t.Skip("set " + poolScaleEnv + "=1,10,50 to measure")
	}
	settle := 45 * time.Second
	if s := os.Getenv("HOOKKEEPER_POOL_SCALE_SETTLE"); s != "" {
		var err error
		if settle, err = time.ParseDuration(s); err != nil {
			t.Fatal(err)
		}
	}
	extra := strings.Fields(os.Getenv("HOOKKEEPER_POOL_SCALE_ARGS"))
	var rows []string
	for _, f := range strings.Split(spec, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			t.Fatalf("%s: %v", poolScaleEnv, err)
		}
		rows = append(rows, measurePool(t, n, settle, extra))
	}
	t.Logf("endpoints | RSS ready | RSS settled | goroutines | DB sessions ready | DB sessions settled\n%s", strings.Join(rows, "\n"))
}

func measurePool(t *testing.T, n int, settle time.Duration, extra []string) string {
	db := testsupport.MigratedDatabase(t, "hookkeeper")
	sinkURL := testsupport.AcceptingSink(t)
	vol := newSecretVolume(t)
	for i := range n {
		name := fmt.Sprintf("ep-%03d", i)
		vol.files[name+".json"] = poolEndpoint{name: name, schema: "hookkeeper", sinkURL: sinkURL}.manifest()
		vol.files[name+".env"] = []byte(config.EnvDatabaseURL + "=" + db + "\n" + config.EnvSigningSecretPrefix + "0=whsec_" + name + "\n")
	}
	vol.publish()

	webhookAddr, adminAddr := testsupport.FreeAddr(t), testsupport.FreeAddr(t)
	began := time.Now()
	proc := dataplanecmd.StartReceiverProcess(t, "pool", adminAddr,
		append([]string{"--endpoints-dir", vol.dir, "--listen-address", webhookAddr,
			"--log-level", "error", "--heartbeat-interval", "5s", "--pod-name", "scale"}, extra...),
		nil, 60*time.Second)
	defer proc.Stop()
	testsupport.Eventually(t, 2*time.Minute, 200*time.Millisecond, "every endpoint ready", func() error {
		resp, err := http.Get("http://" + adminAddr + "/endpoints")
		if err != nil {
			return err
		}
		defer func() { _ = resp.Body.Close() }()
		var list []struct{ Ready bool }
		if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
			return err
		}
		ready := 0
		for _, e := range list {
			if e.Ready {
				ready++
			}
		}
		if ready != n {
			return fmt.Errorf("%d of %d ready", ready, n)
		}
		return nil
	})
	// One webhook each, so every endpoint has served once.
	pool := &runningPool{webhook: "http://" + webhookAddr}
	for i := range n {
		name := fmt.Sprintf("ep-%03d", i)
		if c := pool.post(t, "/"+name+"/", "whsec_"+name); c != http.StatusOK {
			t.Fatalf("%s: %d", name, c)
		}
	}
	t.Logf("%d endpoints: all ready and served once after %s", n, time.Since(began).Round(time.Millisecond))
	watch := newBackendSampler(t, db)
	sessions := func() int { return len(watch.sample()) }
	rssReady, sessReady := testsupport.RSS(t, proc.Pid()), sessions()
	// Idle: no traffic while pooled connections idle out (pooledConnIdleTime).
	deadline := time.Now().Add(settle)
	for time.Now().Before(deadline) {
		select {
		case <-proc.Done():
			t.Fatal(proc.Exited())
		case <-time.After(time.Until(deadline)):
		}
	}
	rssSettled, sessSettled := testsupport.RSS(t, proc.Pid()), sessions()
	goroutines := metricValue(t, adminAddr, "go_goroutines")
	return fmt.Sprintf("%9d | %6d MiB | %8d MiB | %10s | %17d | %d", n, rssReady>>20, rssSettled>>20, goroutines, sessReady, sessSettled)
}

func metricValue(t *testing.T, adminAddr, name string) string {
	t.Helper()
	text, err := testsupport.Metrics("http://" + adminAddr)
	if err != nil {
		return "?"
	}
	if m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindStringSubmatch(text); m != nil {
		return m[1]
	}
	return "?"
}
