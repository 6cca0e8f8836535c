package receiver_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
)

// rawExchange writes raw to the webhook listener and reads every response the server
// sends until it closes the connection or the deadline passes.
func (f *fixture) rawExchange(t *testing.T, raw string, deadline time.Duration) (codes []int, closed bool) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(f.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(deadline))
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return codes, false
			}
			return codes, true
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		codes = append(codes, resp.StatusCode)
	}
}

func headerLines(h http.Header) string {
	var sb strings.Builder
	for k, vs := range h {
		for _, v := range vs {
			fmt.Fprintf(&sb, "%s: %s\r\n", k, v)
		}
	}
	return sb.String()
}

// A request with both Transfer-Encoding: chunked and Content-Length is the classic
// request-smuggling shape: a front proxy that frames by Content-Length and this server,
// which frames by the chunks, disagree on where the next request starts. RFC 9112 §6.1:
// the server may reject it or process it by the chunks, and "regardless, the server
// MUST close the connection after responding". The bytes past the chunked body (which a
// Content-Length-framing proxy counted as part of the first request's body) must never
// be served as a second request on the same connection.
func TestChunkedWithContentLengthClosesTheConnection(t *testing.T) {
	f := newFixture(t, fixtureOptions{provider: v1alpha1.ProviderStripe})
	body := stripeEvent("evt_smuggle", "ord-smuggle", 1)
	chunked := fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body)
	smuggled := "HEAD /hooks HTTP/1.1\r\nHost: x\r\n\r\n"
	raw := "POST /hooks HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n" +
		fmt.Sprintf("Content-Length: %d\r\n", len(chunked)+len(smuggled)) +
		headerLines(stripeHeader(stripeSecret, body)) + "\r\n" + chunked + smuggled

	codes, closed := f.rawExchange(t, raw, 3*time.Second)
	if len(codes) != 1 || !closed {
		t.Fatalf("responses %v, connection closed %v; want one response (or a 400) and the connection closed, "+
			"not the bytes after the chunked body served as another request", codes, closed)
	}
}

// A client that announces an oversized body and waits for
// 100 Continue gets a 413 without the server ever inviting the body, and the
// connection is closed.
func TestExpectContinueOversizedIs413WithoutContinue(t *testing.T) {
	f := newFixture(t, fixtureOptions{provider: v1alpha1.ProviderStripe})
	raw := "POST /hooks HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 100000000\r\n\r\n"
	codes, closed := f.rawExchange(t, raw, 3*time.Second)
	if len(codes) != 1 || codes[0] != http.StatusRequestEntityTooLarge || !closed {
		t.Fatalf("responses %v, closed %v; want one 413 (no 100 Continue) and the connection closed", codes, closed)
	}
}

// Paths that differ from spec.receiver.path only by a trailing
// or doubled slash, a dot segment or an encoded slash are 404 before anything is read,
// and an HTTP/2 prior-knowledge preface on the cleartext port is not served as HTTP/2.
func TestPathVariantsAre404AndH2CIsRefused(t *testing.T) {
	f := newFixture(t, fixtureOptions{provider: v1alpha1.ProviderStripe})
	body := stripeEvent("evt_path", "ord-path", 1)
	for _, p := range []string{"/hooks/", "//hooks", "/x/../hooks", "/hooks/.", "/hooks%2F", "/Hooks", "/hooks;x"} {
		raw := "POST " + p + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + fmt.Sprintf("Content-Length: %d\r\n", len(body)) +
			headerLines(stripeHeader(stripeSecret, body)) + "\r\n" + string(body)
		if codes, _ := f.rawExchange(t, raw, 3*time.Second); len(codes) != 1 || codes[0] != http.StatusNotFound {
			t.Errorf("POST %s: %v, want 404", p, codes)
		}
	}
	f.assertNothingStored()
	if codes, closed := f.rawExchange(t, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 3*time.Second); len(codes) != 1 || codes[0] == http.StatusOK || !closed {
		t.Errorf("h2c preface: %v closed %v, want one HTTP/1 error response and the connection closed", codes, closed)
	}
}

// A slowloris client that never finishes its headers is cut
// off by the 10 s header timeout (with margin), holding no slot meanwhile.
func TestSlowHeadersAreCutOff(t *testing.T) {
	f := newFixture(t, fixtureOptions{provider: v1alpha1.ProviderStripe})
	conn, err := net.Dial("tcp", strings.TrimPrefix(f.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	start := time.Now()
	_ = conn.SetDeadline(start.Add(14 * time.Second))
	if _, err := io.WriteString(conn, "POST /hooks HTTP/1.1\r\nHost: x\r\nX-Slow: 1"); err != nil {
		t.Fatal(err)
	}
	_, err = io.Copy(io.Discard, conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection with unfinished headers still open after %v, want closed after about 10s", time.Since(start))
	}
}
