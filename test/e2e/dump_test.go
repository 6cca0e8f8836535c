package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5"
	. "github.com/onsi/ginkgo/v2" //nolint:revive // Ginkgo's DSL reads best unqualified
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hookkeeper/hookkeeper/internal/demo"
)

// dumpPodLogs prints the tail of every container log the node agent wrote.
func dumpPodLogs() {
	matches, _ := filepath.Glob(filepath.Join(session.Agent.PodLogDir(), "*", "*.log"))
	for _, m := range matches {
		data, err := os.ReadFile(m) //nolint:gosec // pod logs of this suite
		if err != nil {
			GinkgoWriter.Printf("--- %s: %v\n", m, err)
			continue
		}
		if len(data) > 8<<10 {
			data = data[len(data)-8<<10:]
		}
		GinkgoWriter.Printf("--- %s\n%s\n", m, data)
	}
}

// dumpEvents prints the events of the sample namespace.
func dumpEvents(ctx context.Context) {
	list, err := clientset.CoreV1().Events(demo.SampleNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		GinkgoWriter.Printf("--- events: %v\n", err)
		return
	}
	GinkgoWriter.Printf("--- events in %s (%d)\n", demo.SampleNamespace, len(list.Items))
	for _, e := range list.Items {
		GinkgoWriter.Printf("%s %s %s %s/%s: %s\n", e.LastTimestamp.Format("15:04:05"), e.Type, e.Reason,
			e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Message)
	}
}

// dumpTables prints the newest receipts and outbox rows.
func dumpTables(ctx context.Context) {
	db, err := session.DB(ctx)
	if err != nil {
		GinkgoWriter.Printf("--- tables: %v\n", err)
		return
	}
	defer func() { _ = db.Close(context.Background()) }()
	dumpQuery(ctx, db, "webhook_events", `SELECT id, endpoint, event_id, event_type, entity_key, outcome, detail,
		received_at, processed_at FROM hookkeeper.webhook_events ORDER BY id DESC LIMIT 100`)
	dumpQuery(ctx, db, "outbox", `SELECT id, dedupe_key, event_type, source_event_id, entity_key, attempts,
		coalesce(last_error, ''), delivered_at, dead_at FROM hookkeeper.outbox ORDER BY id DESC LIMIT 100`)
}

func dumpQuery(ctx context.Context, db *pgx.Conn, title, query string) {
	rows, err := db.Query(ctx, query)
	if err != nil {
		GinkgoWriter.Printf("--- %s: %v\n", title, err)
		return
	}
	defer rows.Close()
	GinkgoWriter.Printf("--- %s (newest first)\n", title)
	for rows.Next() {
		values, err := rows.Values()
		if err != nil {
			GinkgoWriter.Printf("%s: %v\n", title, err)
			return
		}
		cells := make([]string, len(values))
		for i, v := range values {
			cells[i] = fmt.Sprint(v)
		}
		GinkgoWriter.Printf("%s\n", strings.Join(cells, " | "))
	}
	if err := rows.Err(); err != nil {
		GinkgoWriter.Printf("%s: %v\n", title, err)
	}
}
