// Command razorpay prints the razorpay-sdk-go vector of testdata/providers/razorpay.json.
// Razorpay's Go SDK has no signing function, so the MAC is computed here with crypto/hmac
// and the vector is only printed when the SDK's own utils.VerifyWebhookSignature accepts
// it (and rejects it under another secret). The body is the Netbanking payment.captured
// sample of Razorpay's "Payments Webhook Events" page, compacted.
//
//	cd internal/provider/testdata/sdk/razorpay && go run .
package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"

	"github.com/razorpay/razorpay-go/utils"
)

const (
	secret = "hookkeeper-vector-razorpay-webhook-secret"
	body   = `{"entity":"event","account_id":"acc_BFQ7uQEaa7j2z7","event":"payment.captured","contains":["payment"],"payload":{"payment":{"entity":{"id":"pay_DESlfW9H8K9uqM","entity":"payment","amount":100,"currency":"INR","base_amount":100,"status":"captured","order_id":"order_DESlLckIVRkHWj","invoice_id":null,"international":false,"method":"netbanking","amount_refunded":0,"amount_transferred":0,"refund_status":null,"captured":true,"description":null,"card_id":null,"bank":"HDFC","wallet":null,"vpa":null,"email":"gaurav.kumar@example.com","contact":"+919876543210","notes":[],"fee":2,"tax":0,"error_code":null,"error_description":null,"error_source":null,"error_step":null,"error_reason":null,"acquirer_data":{"bank_transaction_id":"0125836177"},"created_at":1567674599}}},"created_at":1567674606}`
)

func main() {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(body))
	sig := hex.EncodeToString(mac.Sum(nil))
	if !utils.VerifyWebhookSignature(body, sig, secret) || utils.VerifyWebhookSignature(body, sig, "another-secret") {
		fmt.Fprintln(os.Stderr, "razorpay-go does not agree with the computed signature")
		os.Exit(1)
	}
	out, err := json.MarshalIndent(map[string]any{
		"name":            "razorpay-sdk-go",
		"provider":        "Razorpay",
		"published":       false,
		"source":          "computed: HMAC-SHA256 hex with crypto/hmac, accepted by github.com/razorpay/razorpay-go@v1.3.3 utils.VerifyWebhookSignature (testdata/sdk/razorpay/main.go); body: the Netbanking payment.captured sample of Razorpay's Payments Webhook Events page, compacted",
		"secret":          secret,
		"body":            body,
		"headers":         map[string]string{"X-Razorpay-Signature": sig},
		"signatureHeader": "X-Razorpay-Signature",
		"now":             1567674606,
		"method":          "POST",
	}, "    ", "  ")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(string(out))
}
