package devcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// envHelper makes the test binary act as the Pods' executable: the node agent re-runs
// it with the container's args, and TestMain hands over to helperMain.
const envHelper = "DEVCLUSTER_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(envHelper) == "1" {
		os.Exit(helperMain(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// helperMain implements the helper's commands:
//
//	exit CODE   print a line and exit with CODE
//	serve PORT  serve on $POD_IP:PORT until SIGTERM: /healthz answers 200, /env?name=X
//	            answers $X, / answers $HOSTNAME (the Pod name)
func helperMain(args []string) int {
	if len(args) == 2 && args[0] == "exit" {
		code, err := strconv.Atoi(args[1])
		if err != nil {
			fmt.Fprintln(os.Stderr, "bad exit code:", err)
			return 2
		}
		fmt.Println("exiting with", code)
		return code
	}
	if len(args) == 2 && args[0] == "serve" {
		return serve(args[1])
	}
	fmt.Fprintln(os.Stderr, "unknown helper command:", args)
	return 2
}

func serve(port string) int {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/env", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(os.Getenv(r.URL.Query().Get("name"))))
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(os.Getenv("HOSTNAME"))) })
	l, err := net.Listen("tcp", net.JoinHostPort(os.Getenv("POD_IP"), port))
	if err != nil {
		fmt.Fprintln(os.Stderr, "listen:", err)
		return 1
	}
	fmt.Println("listening on", l.Addr())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		fmt.Println("terminating")
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}()
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(os.Stderr, "serve:", err)
		return 1
	}
	return 0
}
