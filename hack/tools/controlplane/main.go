// Command controlplane is etcd, kube-apiserver, kube-controller-manager and
// kube-scheduler in one binary, chosen by the name it is run as (bin/etcd,
// bin/kube-apiserver, ... are links to it) or by its first argument
// (`controlplane kube-apiserver --help`).
//
// One binary instead of four saves three links of the largest Go programs the project
// builds, and puts etcd's modules at one version for the server and the API server's
// client (k3s ships its control plane the same way). `make controlplane` builds it;
// envtest and `hookkeeper dev` run the links as the separate binaries they expect.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	_ "time/tzdata" // time zones for CronJobs, as kube-apiserver and kube-controller-manager embed

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // the JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go's metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // the version metric
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

// components maps each name to the command it runs with args (args[0] is the name).
var components = map[string]func(args []string) int{
	"etcd": func(args []string) int {
		etcdmain.Main(args)
		return 0
	},
	"kube-apiserver":          cobraMain(apiserver.NewAPIServerCommand),
	"kube-controller-manager": cobraMain(controllermanager.NewControllerManagerCommand),
	"kube-scheduler": cobraMain(func() *cobra.Command {
		return scheduler.NewSchedulerCommand()
	}),
}

func cobraMain(newCommand func() *cobra.Command) func(args []string) int {
	return func(args []string) int {
		command := newCommand()
		command.SetArgs(args[1:])
		return cli.Run(command)
	}
}

func main() {
	args := os.Args
	name := filepath.Base(args[0])
	if _, ok := components[name]; !ok && len(args) > 1 {
		name, args = args[1], args[1:]
	}
	run, ok := components[name]
	if !ok {
		names := make([]string, 0, len(components))
		for n := range components {
			names = append(names, n)
		}
		sort.Strings(names)
		fmt.Fprintf(os.Stderr, "controlplane: run me as one of %s (a link named so, or the first argument)\n", strings.Join(names, ", "))
		os.Exit(2)
	}
	os.Exit(run(args))
}
