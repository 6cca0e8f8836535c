package config

import (
	"net/netip"
	"strings"
	"testing"
)

// A sink URL is where the dispatcher POSTs every event, signed with the delivery key,
// from inside the cluster. One naming a cloud instance-metadata service is a request to
// the node's credentials endpoint, never an app: refused, naming the field. Other
// schemes than http and https are refused too; ordinary hosts pass.
func TestSinkURLRefusesMetadataAndOtherSchemes(t *testing.T) {
	for _, tc := range []struct {
		url  string
		want string // "" passes
	}{
		{"http://169.254.169.254/latest/meta-data/iam/security-credentials/", "instance-metadata"},
		{"http://169.254.170.2/v2/credentials", "instance-metadata"},
		{"http://[fd00:ec2::254]/latest/meta-data/", "instance-metadata"},
		{"http://[fe80::1%25eth0]:8080/", "instance-metadata"},
		{"http://[::ffff:169.254.169.254]/", "instance-metadata"},
		{"http://metadata.google.internal/computeMetadata/v1/", "instance-metadata"},
		{"http://METADATA.google.internal./computeMetadata/v1/", "instance-metadata"},
		{"file:///etc/passwd", "is not http or https"},
		{"gopher://x", "is not http or https"},
		{"http:///nohost", "has no host"},
		{"http://fulfilment.shop.svc:8080/hooks", ""},
		{"https://10.0.0.7/hooks", ""},
		{"http://[fd00::1]/hooks", ""},
	} {
		t.Run(tc.url, func(t *testing.T) {
			we := validEndpoint(t)
			we.Spec.Delivery.Sink.ServiceRef = nil
			we.Spec.Delivery.Sink.URL = tc.url
			err := Validate(we)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Validate = %v, want the sink accepted", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), "spec.delivery.sink.url") || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Validate = %v, want an error naming spec.delivery.sink.url and %q", err, tc.want)
			}
		})
	}
}

func TestIsMetadataAddress(t *testing.T) {
	for addr, want := range map[string]bool{
		"169.254.169.254": true, "169.254.0.1": true, "fe80::1": true, "fd00:ec2::254": true,
		"::ffff:169.254.169.254": true, "10.0.0.7": false, "127.0.0.1": false, "fd00:ec2::253": false,
	} {
		if got := IsMetadataAddress(netip.MustParseAddr(addr)); got != want {
			t.Errorf("IsMetadataAddress(%s) = %v, want %v", addr, got, want)
		}
	}
}
