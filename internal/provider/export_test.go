package provider

import "github.com/hookkeeper/hookkeeper/internal/signature"

// For the provider_test package (extract_test.go), which reads the vectors through the
// same loader as this package's tests.

// VectorNamed is vectorNamed.
var VectorNamed = vectorNamed

// PresetValues is presetValues, and ExpectPresetValues compares two of them.
type PresetValues = presetValues

var ExpectPresetValues = expectPresetValues

// Request is the vector's request.
func (v vector) Request() signature.Request { return v.request() }
