// Package resources builds the objects the operator owns for a WebhookEndpoint: pure
// functions from an endpoint and a few resolved inputs (image, rendered config, config
// hash) to fully specified desired objects. Nothing here talks to the API server, so
// every builder is table-tested without a client; the controller only applies what
// these functions return.
package resources
