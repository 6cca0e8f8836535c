package devcluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWriteAtomicSwapsWholeVersions: a Secret volume is updated as the kubelet does it,
// so a reader that lists the directory and reads each key sees one version: keys
// removed from the Secret disappear, changed keys change, and old versions are gone.
func TestWriteAtomicSwapsWholeVersions(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "endpoints")
	read := func() map[string]string {
		t.Helper()
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		hidden := 0
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), "..") {
				hidden++
				continue
			}
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			got[e.Name()] = string(b)
		}
		if hidden != 2 { // ..data and the one version it points at
			t.Errorf("hidden entries: %d, want 2 (..data and its version)", hidden)
		}
		return got
	}
	if err := writeAtomic(dir, map[string][]byte{"a.json": []byte("1"), "b.json": []byte("2")}, 0o440); err != nil {
		t.Fatal(err)
	}
	if got := read(); len(got) != 2 || got["a.json"] != "1" || got["b.json"] != "2" {
		t.Fatalf("first version: %v", got)
	}
	if err := writeAtomic(dir, map[string][]byte{"a.json": []byte("3")}, 0o440); err != nil {
		t.Fatal(err)
	}
	if got := read(); len(got) != 1 || got["a.json"] != "3" {
		t.Fatalf("second version: %v, want only a.json=3", got)
	}
	info, err := os.Stat(filepath.Join(dir, "a.json"))
	if err != nil || info.Mode().Perm() != 0o440 {
		t.Errorf("mode of a.json: %v (%v), want 0440", info.Mode().Perm(), err)
	}

	mounts := []*mountedSecret{{mountPath: "/etc/hookkeeper/endpoints", dir: dir}}
	args := []string{"receiver", "--endpoints-dir=/etc/hookkeeper/endpoints"}
	env := []string{"X=/etc/hookkeeper/endpoints/a.json", "Y=/etc/other"}
	rewriteMounts(mounts, args, env)
	if args[1] != "--endpoints-dir="+dir || env[0] != "X="+dir+"/a.json" || env[1] != "Y=/etc/other" {
		t.Errorf("rewritten: %v %v", args, env)
	}
}
