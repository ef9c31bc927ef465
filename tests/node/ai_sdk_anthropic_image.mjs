// The Vercel AI SDK's Anthropic provider (@ai-sdk/anthropic, as OpenCode uses it)
// sending one image, its base URL taken from ANTHROPIC_BASE_URL as a user exports it.
// Usage: ANTHROPIC_BASE_URL=... node ai_sdk_anthropic_image.mjs PNG_PATH -> {"text"} JSON.
import { readFileSync } from "node:fs";
import { createAnthropic } from "@ai-sdk/anthropic";
import { generateText } from "ai";

const [pngPath] = process.argv.slice(2);
const anthropic = createAnthropic({ apiKey: "sk-test" });
const result = await generateText({
  model: anthropic("claude-sonnet-4-6"),
  maxRetries: 0,
  messages: [
    {
      role: "user",
      content: [
        { type: "text", text: "What does this image say?" },
        { type: "image", image: readFileSync(pngPath), mediaType: "image/png" },
      ],
    },
  ],
});
console.log(JSON.stringify({ text: result.text }));
