module github.com/hookkeeper/hookkeeper/internal/provider/testdata/sdk/svix

go 1.26.8

require (
	github.com/resend/resend-go/v2 v2.28.0
	github.com/svix/svix-webhooks v1.44.0
)

require gopkg.in/validator.v2 v2.0.1 // indirect
