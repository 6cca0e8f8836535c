package outbox

import (
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// last_error never holds the sink's URL, host or address: not the address of a refused
// dial, not the host of a failed lookup, not the name a certificate mismatch repeats.
func TestLastErrorNeverNamesTheSink(t *testing.T) {
	const sink = "http://user:secret@127.0.0.1:1/events"
	d := &Dispatcher{opts: Options{SinkURL: sink, Timeout: time.Second}}

	// A real refused dial: "dial tcp 127.0.0.1:1: connect: connection refused".
	resp, dialErr := (&http.Client{Timeout: 5 * time.Second}).Post(sink, "application/json", strings.NewReader("{}"))
	if dialErr == nil {
		_ = resp.Body.Close()
		t.Skip("something listens on 127.0.0.1:1")
	}
	named := &Dispatcher{opts: Options{SinkURL: "https://fulfilment.shop.svc:8443/events", Timeout: time.Second}}
	cases := []struct {
		name string
		d    *Dispatcher
		err  error
		want string
	}{
		{"refused dial", d, dialErr, "dial tcp: connect: connection refused"},
		{"failed lookup", named, &url.Error{Op: "Post", URL: named.opts.SinkURL, Err: &net.OpError{Op: "dial", Net: "tcp",
			Err: &net.DNSError{Err: "no such host", Name: "fulfilment.shop.svc", Server: "10.96.0.10:53", IsNotFound: true}}},
			"lookup of the sink's host: no such host"},
		{"certificate for another name", named, &url.Error{Op: "Post", URL: named.opts.SinkURL,
			Err: errors.New("tls: failed to verify certificate: x509: certificate is valid for other.example, not fulfilment.shop.svc")},
			"tls: failed to verify certificate: x509: certificate is valid for other.example, not <sink>"},
		{"status", d, nil, "sink answered 503"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := attempt{sent: true, err: tc.err, status: 503}
			got := tc.d.describe(a)
			if got != tc.want {
				t.Errorf("last_error = %q, want %q", got, tc.want)
			}
			for _, leak := range []string{"127.0.0.1", ":1", "secret", "fulfilment.shop.svc", "10.96.0.10", "/events"} {
				if strings.Contains(got, leak) {
					t.Errorf("last_error %q contains %q", got, leak)
				}
			}
		})
	}
}
