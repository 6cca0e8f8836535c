package provider

import "github.com/hookkeeper/hookkeeper/internal/signature"

// For the provider_test package (extract_test.go), which reads the vectors through the
// same loader as this package's tests.

// VectorNamed is vectorNamed.
var VectorNamed = vectorNamed

// OracleMAC is oracleMAC.
var OracleMAC = oracleMAC

// Request is the vector's request.
func (v vector) Request() signature.Request { return v.request() }
