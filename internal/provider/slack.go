package provider

import (
	"encoding/json"
	"net/http"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/signature"
)

// Slack signs `v0:{timestamp}:{body}` with HMAC-SHA256 under the app's signing secret.
// Setting an app's Request URL sends a signed url_verification request whose
// challenge must come back.
func init() {
	register(slackStyle("X-Slack-Signature", "X-Slack-Request-Timestamp", Provider{
		Type: v1alpha1.ProviderSlack,
		Preset: Preset{
			ID:         `body.event_id`,
			Type:       `body.event.type`,
			EntityKey:  `body.event.channel`,
			OccurredAt: `body.event_time`,
		},
		Handshake: slackHandshake,
		Sample:    slackSample,
		Doc: Doc{
			Handshake: "`url_verification`: the `challenge` is echoed",
			Key:       "the app's signing secret (raw)",
		},
	}))
}

func slackHandshake(v *signature.Verified, _ http.Header) (Response, bool) {
	var req struct {
		Type      string `json:"type"`
		Challenge string `json:"challenge"`
	}
	if !decodeDocument(v, &req) || req.Type != "url_verification" || req.Challenge == "" {
		return Response{}, false
	}
	return jsonResponse(map[string]string{"challenge": req.Challenge})
}

// decodeDocument decodes the one signed document of v into out.
func decodeDocument(v *signature.Verified, out any) bool {
	docs, err := v.Documents()
	return err == nil && len(docs) == 1 && json.Unmarshal(docs[0], out) == nil
}

// jsonResponse is a 200 with a JSON body.
func jsonResponse(body any) (Response, bool) {
	b, err := json.Marshal(body)
	if err != nil {
		return Response{}, false
	}
	return Response{Status: http.StatusOK, ContentType: "application/json", Body: b}, true
}

// slackSample is an event_callback in the channel the entity key names.
func slackSample(e SampleEvent) (Delivery, error) {
	return jsonDelivery(map[string]any{
		"type": "event_callback", "event_id": e.ID, "event_time": e.Time.Unix(),
		"event": map[string]any{"type": e.Type, "channel": e.EntityKey},
	})
}
