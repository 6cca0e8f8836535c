module github.com/hookkeeper/hookkeeper/internal/provider/testdata/sdk/razorpay

go 1.26.8

require github.com/razorpay/razorpay-go v1.3.3

require (
	github.com/davecgh/go-spew v1.1.0 // indirect
	github.com/pmezard/go-difflib v1.0.0 // indirect
	github.com/stretchr/testify v1.5.1 // indirect
	gopkg.in/yaml.v2 v2.2.2 // indirect
)
