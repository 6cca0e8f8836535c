package signature

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strconv"
	"time"
)

// SignStandardWebhooks returns the webhook-signature value ("v1,<base64>") of a message
// signed with a decoded Standard Webhooks key (see DecodeWhsec). The dispatcher signs
// its deliveries with it.
func SignStandardWebhooks(key []byte, id string, ts time.Time, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + strconv.FormatInt(ts.Unix(), 10) + "."))
	m.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}
