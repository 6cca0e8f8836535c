package main

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/hookkeeper/hookkeeper/controllers"
	"github.com/hookkeeper/hookkeeper/internal/resources"
	"github.com/hookkeeper/hookkeeper/internal/version"
)

// envImage names the image the manager gives receiver pods when --receiver-image is not
// set; the manager's Deployment sets it to its own image.
const envImage = "HOOKKEEPER_IMAGE"

// envNamespace names the operator's namespace when --key-namespace is not set; without
// either, the namespace of the pod's service account is used.
const envNamespace = "POD_NAMESPACE"

// serviceAccountNamespace is where Kubernetes mounts the pod's namespace.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// operatorNamespace is the namespace the operator keeps its own Secret in: the flag,
// else the pod's namespace, else the leader election namespace.
func operatorNamespace(f managerFlags) (string, error) {
	if f.keyNamespace != "" {
		return f.keyNamespace, nil
	}
	if b, err := os.ReadFile(serviceAccountNamespace); err == nil && strings.TrimSpace(string(b)) != "" {
		return strings.TrimSpace(string(b)), nil
	}
	if f.leaderElectionNS != "" {
		return f.leaderElectionNS, nil
	}
	return "", errors.New("no namespace for the hash key Secret: set --key-namespace or " + envNamespace + " (outside a cluster)")
}

func init() { rootCmd.AddCommand(newManagerCmd()) }

type managerFlags struct {
	metricsAddr      string
	metricsSecure    bool
	probeAddr        string
	leaderElect      bool
	leaderElectionNS string
	receiverImage    string
	allowedImages    []string
	enableHTTP2      bool
	keyNamespace     string
	logLevel         string
	monitoringLabels string
}

func newManagerCmd() *cobra.Command {
	var f managerFlags
	zapOpts := zap.Options{}
	cmd := &cobra.Command{
		Use:   "manager",
		Short: "Run the operator: reconcile WebhookEndpoints into receivers",
		Long: "manager runs the WebhookEndpoint controller: it validates each endpoint, resolves its\n" +
			"Secrets, runs the schema migration Job and keeps the receiver Deployment, Service, PDB,\n" +
			"NetworkPolicy, exposure and monitoring objects in shape. Only the elected leader reconciles.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("log-level") {
				lvl, err := zapcore.ParseLevel(f.logLevel)
				if err != nil {
					return fmt.Errorf("--log-level: %w", err)
				}
				zapOpts.Level = lvl
			}
			ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
			return runManager(cmd, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.metricsAddr, "metrics-bind-address", ":8080", "address of the metrics endpoint; \"0\" disables it")
	fl.BoolVar(&f.metricsSecure, "metrics-secure", true, "serve metrics over HTTPS with Kubernetes authentication and authorization; false serves plain HTTP")
	fl.StringVar(&f.probeAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	fl.BoolVar(&f.leaderElect, "leader-elect", true, "elect a leader so only one replica reconciles")
	fl.StringVar(&f.leaderElectionNS, "leader-election-namespace", "", "namespace of the leader election Lease (default: the pod's namespace)")
	fl.StringVar(&f.receiverImage, "receiver-image", os.Getenv(envImage), "image of the receiver and migration pods (default: $"+envImage+")")
	fl.StringSliceVar(&f.allowedImages, "allowed-receiver-images", nil,
		"other images an endpoint's spec.receiver.image or a pool's spec.image may name, separated by commas; "+
			"an entry ending in * allows every image it is a prefix of (registry.example/hookkeeper:*). "+
			"Those pods get the Secrets their endpoints name, so by default only --receiver-image runs them")
	fl.StringVar(&f.keyNamespace, "key-namespace", os.Getenv(envNamespace),
		"namespace of the Secret "+controllers.HashKeySecretName+" that keys the rollout hashes (default: $"+envNamespace+", else the pod's namespace)")
	fl.BoolVar(&f.enableHTTP2, "enable-http2", false, "serve metrics over HTTP/2 (off by default: HTTP/2 rapid reset, CVE-2023-44487)")
	fl.StringVar(&f.monitoringLabels, "monitoring-labels", "",
		"labels added to every endpoint's ServiceMonitor and PrometheusRule, as key=value pairs separated by commas "+
			"(e.g. release=kube-prometheus-stack, what a default kube-prometheus-stack selects by); "+
			"an endpoint's spec.monitoring.labels win on the same key; the operator's own app.kubernetes.io labels cannot be set")
	fl.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error (as the receiver's); wins over --zap-log-level")
	// controller-runtime's zap flags stay for those who use them; --zap-log-level is the
	// old spelling of --log-level.
	goFlags := flag.NewFlagSet("zap", flag.ContinueOnError)
	zapOpts.BindFlags(goFlags)
	fl.AddGoFlagSet(goFlags)
	if z := fl.Lookup("zap-log-level"); z != nil {
		z.Usage = "alias of --log-level, in controller-runtime's spelling: " + z.Usage
	}
	return cmd
}

func runManager(cmd *cobra.Command, f managerFlags) error {
	if f.receiverImage == "" {
		return errors.New("no receiver image: set --receiver-image or " + envImage)
	}
	monitoringLabels, err := resources.ParseMonitoringLabels(f.monitoringLabels)
	if err != nil {
		return fmt.Errorf("--monitoring-labels: %w", err)
	}
	scheme := runtime.NewScheme()
	if err := controllers.AddToScheme(scheme); err != nil {
		return err
	}
	metricsOpts := metricsserver.Options{BindAddress: f.metricsAddr, SecureServing: f.metricsSecure}
	if !f.enableHTTP2 {
		metricsOpts.TLSOpts = []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }}
	}
	if f.metricsSecure {
		metricsOpts.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	keyNamespace, err := operatorNamespace(f)
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Cache:                         controllers.CacheOptions(),
		Client:                        controllers.ClientOptions(),
		Metrics:                       metricsOpts,
		HealthProbeBindAddress:        f.probeAddr,
		LeaderElection:                f.leaderElect,
		LeaderElectionID:              "hookkeeper-manager.hookkeeper.dev",
		LeaderElectionNamespace:       f.leaderElectionNS,
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}
	if err := controllers.Setup(mgr, controllers.Options{
		ReceiverImage: f.receiverImage, AllowedImages: f.allowedImages, KeyNamespace: keyNamespace,
		MonitoringLabels: monitoringLabels,
	}); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("add health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return fmt.Errorf("add ready check: %w", err)
	}
	ctrl.Log.WithName("manager").Info("starting", "version", version.Get().String(), "receiverImage", f.receiverImage, "leaderElection", f.leaderElect)
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("run manager: %w", err)
	}
	return nil
}
