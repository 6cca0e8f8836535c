module sdktwilio

go 1.26

require github.com/twilio/twilio-go v1.31.0

require (
	github.com/golang/mock v1.6.0 // indirect
	github.com/pkg/errors v0.9.1 // indirect
)
