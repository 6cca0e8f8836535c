// Computes the Linear test vector of hookkeeper's
// internal/provider/testdata/providers/linear.json and checks it with Linear's official
// TypeScript SDK.
//
//   npm install @linear/sdk@98.0.0 && node gen.mjs
//
// The body is the requestBody of @linear/sdk's own test, packages/sdk/src/_tests/
// LinearWebhooks.test.ts, serialised the same way (JSON.stringify). It is signed as that
// test signs it (HMAC-SHA256 hex of the raw body, node:crypto) under a test secret, then
// verified with LinearWebhookClient.verify, which also demands a webhookTimestamp within
// 60 s of Date.now(); Date.now is pinned to the vector's clock for that check.
import crypto from "node:crypto";
import { LinearWebhookClient } from "@linear/sdk/webhooks";

const secret = "lin_wh_hookkeeperTestSecret0001";
const requestBody = {
  action: "create",
  data: {
    id: "2174add1-f7c8-44e3-bbf3-2d60b5ea8bc9",
    createdAt: "2020-01-23T12:53:18.084Z",
    updatedAt: "2020-01-23T12:53:18.084Z",
    archivedAt: null,
    body: "Indeed, I think this is definitely an improvement over the previous version.",
    edited: false,
    issueId: "539068e2-ae88-4d09-bd75-22eb4a59612f",
    userId: "aacdca22-6266-4c0a-ab3c-8fa70a26765c",
  },
  type: "Comment",
  url: "https://linear.app/issue/LIN-1778/foo-bar#comment-77217de3-fb52-4dad-bb9a-b356beb93de8",
  createdAt: "2020-01-23T12:53:18.084Z",
  webhookTimestamp: 1677611643000,
};
const body = JSON.stringify(requestBody);
const rawBody = Buffer.from(body);
const signature = crypto.createHmac("sha256", secret).update(rawBody).digest("hex");
const now = 1677611645; // two seconds after webhookTimestamp

const realNow = Date.now;
Date.now = () => now * 1000;
new LinearWebhookClient(secret).verify(rawBody, signature); // throws unless valid
let rejected = false;
try {
  new LinearWebhookClient("an-entirely-different-secret").verify(rawBody, signature);
} catch {
  rejected = true;
}
Date.now = () => (now + 61) * 1000;
let stale = false;
try {
  new LinearWebhookClient(secret).verify(rawBody, signature);
} catch {
  stale = true;
}
Date.now = realNow;
if (!rejected || !stale) throw new Error("the SDK accepted a wrong secret or a stale timestamp");

console.log(JSON.stringify({ body, signature, now }, null, 2));
