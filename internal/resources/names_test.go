package resources

import (
	"strings"
	"testing"

	"github.com/hookkeeper/hookkeeper/internal/store"
)

func TestBoundedNames(t *testing.T) {
	long := strings.Repeat("a", 200)
	for _, tc := range []struct{ base, suffix string }{
		{"orders", "-receiver"}, {long, "-receiver"}, {long, "-migrate-v1"}, {long + "b", "-receiver"},
		{strings.Repeat("x", 54), "-receiver"}, {strings.Repeat("x", 55), "-receiver"},
	} {
		got := boundedName(tc.base, tc.suffix)
		if len(got) > maxNameLength || !strings.HasSuffix(got, tc.suffix) {
			t.Errorf("boundedName(%d chars, %q) = %q (%d chars)", len(tc.base), tc.suffix, got, len(got))
		}
	}
	if boundedName(long, "-receiver") == boundedName(long+"b", "-receiver") {
		t.Error("distinct long names must stay distinct")
	}
	if got := boundedName("orders", "-receiver"); got != "orders-receiver" {
		t.Errorf("short name changed: %q", got)
	}
	ep := endpoint()
	if got, want := MigrationJobName(ep), "orders-migrate-v"; !strings.HasPrefix(got, want) ||
		!strings.HasSuffix(got, "v"+jsonNumber(store.SchemaVersion)) {
		t.Errorf("MigrationJobName = %q", got)
	}
}
