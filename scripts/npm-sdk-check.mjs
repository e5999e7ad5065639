// The official npm `openai` SDK against a running SkyWalker: a background
// Responses request is created, then retrieved until it ends; its output
// must be a list every time (the SDK iterates it: `rsp.output is not
// iterable` when an engine sends null). Run by scripts/npm-sdk-check.sh;
// BASE_URL is a proxy's /v1 address, MODEL a model it serves.
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.env.BASE_URL, apiKey: "unused" });
const fail = (msg) => { console.error("FAIL: " + msg); process.exit(1); };

let rsp = await client.responses.create({ model: process.env.MODEL, input: "tell me a story", background: true, max_output_tokens: 64 });
console.log(`created ${rsp.id}: ${rsp.status}, output ${JSON.stringify(rsp.output)}`);
if (!Array.isArray(rsp.output)) fail(`output at creation is ${JSON.stringify(rsp.output)}, want a list`);
const deadline = Date.now() + 60_000;
while (rsp.status === "queued" || rsp.status === "in_progress") {
  if (Date.now() > deadline) fail(`still ${rsp.status} after 60 s`);
  await new Promise((r) => setTimeout(r, 200));
  rsp = await client.responses.retrieve(rsp.id);
  if (!Array.isArray(rsp.output)) fail(`output while ${rsp.status} is ${JSON.stringify(rsp.output)}, want a list`);
}
const text = rsp.output_text; // the SDK's own walk over output
console.log(`ended ${rsp.status} with ${rsp.usage?.output_tokens} output tokens: ${JSON.stringify(text.slice(0, 60))}...`);
if (!["completed", "incomplete"].includes(rsp.status) || !text) fail(`ended ${rsp.status} with ${JSON.stringify(text)}`);
console.log("OK: the npm SDK created, retrieved and read a background response");
