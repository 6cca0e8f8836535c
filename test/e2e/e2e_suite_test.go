// Package e2e drives the whole system on the local cluster of `hookkeeper dev`: a real
// control plane, receiver pods running the hookkeeper binary as processes, the operator
// in process and a real PostgreSQL. Specs apply manifests, send signed requests, rotate
// Secrets, kill processes and check the database.
package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2" //nolint:revive // Ginkgo's DSL reads best unqualified
	. "github.com/onsi/gomega"    //nolint:revive // gomega's matchers read best unqualified
	"go.uber.org/zap/zapcore"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/hookkeeper/hookkeeper/controllers"
	"github.com/hookkeeper/hookkeeper/internal/devcluster"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

var (
	databaseURL string
	session     *devcluster.Session
	clientset   kubernetes.Interface
	// hookkeeperBinary is the binary of this tree the pods run; specs run its commands.
	hookkeeperBinary string
)

// envBinary names a prebuilt hookkeeper binary (the Makefile sets it).
const envBinary = "HOOKKEEPER_BINARY"

func TestMain(m *testing.M) { testsupport.Main(m) }

func TestE2E(t *testing.T) {
	// A database of its own, dropped when the suite ends (after AfterSuite has stopped
	// every receiver connected to it).
	databaseURL = testsupport.NewDatabase(t)
	RegisterFailHandler(Fail)
	RunSpecs(t, "hookkeeper end-to-end")
}

var _ = BeforeSuite(func(ctx SpecContext) {
	ctrl.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.Level(zapcore.InfoLevel)))
	root, err := devcluster.RepoRoot()
	Expect(err).NotTo(HaveOccurred())
	binDir := os.Getenv(devcluster.EnvBinDir)
	if binDir == "" {
		binDir = filepath.Join(root, "bin")
	}

	// The receiver and migration pods run the hookkeeper binary of this tree: the one
	// `make` built ($HOOKKEEPER_BINARY), else one built here.
	exe := os.Getenv(envBinary)
	if exe == "" {
		exe = filepath.Join(GinkgoT().TempDir(), "hookkeeper")
		build := exec.CommandContext(ctx, "go", "build", "-o", exe, "./cmd/hookkeeper")
		build.Dir = root
		build.Stdout, build.Stderr = GinkgoWriter, GinkgoWriter
		begin := time.Now()
		Expect(build.Run()).To(Succeed(), "build the hookkeeper binary")
		GinkgoWriter.Printf("built %s in %.1fs\n", exe, time.Since(begin).Seconds())
	}
	Expect(exe).To(BeAnExistingFile())
	hookkeeperBinary = exe

	session, err = devcluster.StartSession(ctx, devcluster.SessionOptions{
		BinDir:      binDir,
		RepoRoot:    root,
		Executable:  exe,
		DatabaseURL: databaseURL,
		StartOperator: func(ctx context.Context, cfg *rest.Config) error {
			return controllers.RunInProcess(ctx, cfg, controllers.Options{ReceiverImage: "hookkeeper:e2e"})
		},
		ApplySamples: true,
		Out:          GinkgoWriter,
		Log:          ctrl.Log.WithName("devcluster"),
	})
	Expect(err).NotTo(HaveOccurred())
	clientset, err = kubernetes.NewForConfig(session.Cluster.Config())
	Expect(err).NotTo(HaveOccurred())
	// The operator runs as its installed ServiceAccount (devcluster.OperatorConfig): its
	// hash key Secret is in the account's namespace, created through the hash key Role.
	_, err = clientset.CoreV1().Secrets(devcluster.OperatorNamespace).Get(ctx, controllers.HashKeySecretName, metav1.GetOptions{})
	Expect(err).NotTo(HaveOccurred(), "the operator's hash key Secret in %s", devcluster.OperatorNamespace)
}, NodeTimeout(5*time.Minute))

var _ = AfterSuite(func() {
	if session != nil {
		session.Stop()
	}
})

// A failed spec dumps what explains it: the pod logs (where a receiver says why), the
// namespace's events and the newest rows of the receipt and outbox tables.
var _ = AfterEach(func() {
	if !CurrentSpecReport().Failed() || session == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dumpPodLogs()
	dumpEvents(ctx)
	dumpTables(ctx)
})
