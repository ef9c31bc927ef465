// The Vercel AI SDK (ai + @ai-sdk/openai-compatible) running one tool that returns an
// image, against BASE_URL (the reference server, or visus proxy in front of it).
// Usage: node ai_sdk_tool_image.mjs BASE_URL PNG_PATH  -> prints {"text", "steps"} JSON.
import { readFileSync } from "node:fs";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { generateText, stepCountIs, tool } from "ai";
import { z } from "zod";

const [baseURL, pngPath] = process.argv.slice(2);
const png = readFileSync(pngPath).toString("base64");
const provider = createOpenAICompatible({ name: "visus-test", baseURL, apiKey: "sk-test" });

const screenshot = tool({
  description: "Take a screenshot of a page",
  inputSchema: z.object({ page: z.string() }),
  execute: async ({ page }) => ({ page, png }),
  // The documented way to hand a model an image from a tool: a media content part.
  toModelOutput: ({ output }) => ({
    type: "content",
    value: [
      { type: "text", text: `screenshot of ${output.page}` },
      { type: "media", data: output.png, mediaType: "image/png" },
    ],
  }),
});

const result = await generateText({
  model: provider("reference"),
  tools: { screenshot },
  stopWhen: stepCountIs(3),
  prompt: 'call screenshot {"page": "login"}',
});
console.log(JSON.stringify({ text: result.text, steps: result.steps.length }));
