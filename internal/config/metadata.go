package config

import (
	"net/netip"
	"strings"
)

// The cloud instance-metadata services answer on link-local addresses (169.254.169.254
// on AWS, GCP and Azure, 169.254.170.2 for ECS task credentials) and on AWS's IPv6
// fd00:ec2::254; GCP also names its own metadata.google.internal. A sink there is never
// an app: the dispatcher would POST events, signed with the delivery key, to the node's
// credentials service. ValidateSinkHost refuses such a sink URL, and the dispatcher
// refuses to dial such an address whatever name resolved to it (IsMetadataAddress).
var awsMetadataV6 = netip.MustParseAddr("fd00:ec2::254")

// IsMetadataAddress reports whether ip is link-local (IPv4 169.254.0.0/16, IPv6
// fe80::/10) or AWS's IPv6 instance-metadata address.
func IsMetadataAddress(ip netip.Addr) bool {
	ip = ip.Unmap()
	return ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip == awsMetadataV6
}

// isMetadataHost reports whether a URL's host names an instance-metadata service: one
// of the addresses above, or a metadata host name.
func isMetadataHost(host string) bool {
	h := strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if i := strings.IndexByte(h, '%'); i >= 0 { // an IPv6 zone
		h = h[:i]
	}
	if ip, err := netip.ParseAddr(h); err == nil {
		return IsMetadataAddress(ip)
	}
	return h == "metadata.google.internal"
}
