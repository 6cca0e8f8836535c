package outbox

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
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
		{"status", d, nil, "sink answered 503"},
	}
	// Real TLS failures: x509's messages name what the certificate is valid for (the
	// sink's other host names, here example.com), which last_error must not repeat.
	tlsSink := httptest.NewTLSServer(http.NotFoundHandler())
	t.Cleanup(tlsSink.Close)
	trusting := x509.NewCertPool()
	trusting.AddCert(tlsSink.Certificate())
	for _, tc := range []struct {
		name, url string
		roots     *x509.CertPool
		want      string
	}{
		{"certificate of an unknown authority", tlsSink.URL, nil, "the sink's TLS certificate is signed by an unknown authority"},
		{"certificate for other names", strings.Replace(tlsSink.URL, "127.0.0.1", "localhost", 1), trusting,
			"the sink's TLS certificate is not valid for the sink's host name"},
	} {
		client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: tc.roots}}}
		resp, err := client.Post(tc.url, "application/json", strings.NewReader("{}"))
		if err == nil {
			_ = resp.Body.Close()
			t.Fatalf("%s: the request to %s succeeded", tc.name, tc.url)
		}
		if !strings.Contains(err.Error(), "example.com") && tc.roots != nil {
			t.Fatalf("%s: the TLS error %q does not name the certificate's hosts: the case shows nothing", tc.name, err)
		}
		cases = append(cases, struct {
			name string
			d    *Dispatcher
			err  error
			want string
		}{tc.name, &Dispatcher{opts: Options{SinkURL: tc.url, Timeout: time.Second}}, err, tc.want})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := attempt{sent: true, err: tc.err, status: 503}
			got := tc.d.describe(a)
			if got != tc.want {
				t.Errorf("last_error = %q, want %q", got, tc.want)
			}
			for _, leak := range []string{"127.0.0.1", ":1", "secret", "fulfilment.shop.svc", "10.96.0.10", "/events", "example.com", "localhost"} {
				if strings.Contains(got, leak) {
					t.Errorf("last_error %q contains %q", got, leak)
				}
			}
		})
	}
}

// last_error is stored in a text column, which refuses invalid UTF-8 and NUL: an error
// that quotes what a sink sent must still be storable, and cut between characters, or
// the statement recording the whole batch fails on every attempt.
func TestLastErrorIsStorableText(t *testing.T) {
	d := &Dispatcher{opts: Options{SinkURL: "https://sink.example/events", Timeout: time.Second}}
	// 199 ASCII bytes, then a 3-byte character across the 200-byte cut.
	long := "tls: " + strings.Repeat("x", 194) + "€ and more"
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"multi-byte character across the cut", errors.New(long), "tls: " + strings.Repeat("x", 194)},
		{"invalid UTF-8", errors.New("bad \xff\xfe name"), "bad \uFFFD name"},
		{"NUL", errors.New("bad \x00 name"), "bad \uFFFD name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := d.describe(attempt{sent: true, err: tc.err})
			if got != tc.want {
				t.Errorf("last_error = %q, want %q", got, tc.want)
			}
			if !utf8.ValidString(got) || strings.ContainsRune(got, 0) || len(got) > maxErrorLen {
				t.Errorf("last_error %q is not storable text of at most %d bytes", got, maxErrorLen)
			}
		})
	}
}

// The dispatcher's own client never connects to an instance-metadata address, whatever
// the sink's name resolved to (config validation refuses only literal ones): the dial
// fails before any packet is sent, and last_error says why without the address.
func TestDispatcherNeverDialsMetadataAddresses(t *testing.T) {
	for _, sink := range []string{"http://169.254.169.254/latest/meta-data/", "http://[fe80::1]:8080/hooks"} {
		d := &Dispatcher{opts: Options{SinkURL: sink, Concurrency: 1, Timeout: time.Second}}
		resp, err := d.newHTTPClient().Post(sink, "application/json", strings.NewReader("{}"))
		if err == nil {
			_ = resp.Body.Close()
			t.Fatalf("%s: the request was sent", sink)
		}
		if !errors.Is(err, errMetadataAddress) {
			t.Fatalf("%s: %v, want the dial refused before connecting", sink, err)
		}
		got := d.describe(attempt{sent: true, err: err})
		if !strings.Contains(got, "instance-metadata") || strings.Contains(got, "169.254") || strings.Contains(got, "fe80") {
			t.Errorf("%s: last_error = %q, want the reason without the address", sink, got)
		}
	}
}
