// The committed src/schema.d.ts is what openapi-typescript makes of
// contracts/openapi.json today: regenerate it with `npm run generate`.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import assert from "node:assert/strict";

const root = new URL("..", import.meta.url).pathname;

test("src/schema.d.ts is generated from contracts/openapi.json", () => {
  // The flags are the generate script's (package.json), with another output.
  const script: string = JSON.parse(readFileSync(join(root, "package.json"), "utf8")).scripts.generate;
  const args = script.split(" ").slice(1);
  const dir = mkdtempSync(join(tmpdir(), "entityflow-schema-"));
  try {
    const out = join(dir, "schema.d.ts");
    args[args.indexOf("--output") + 1] = out;
    execFileSync(process.execPath, [join(root, "node_modules/openapi-typescript/bin/cli.js"), ...args], { cwd: root, stdio: "pipe" });
    assert.equal(
      readFileSync(join(root, "src/schema.d.ts"), "utf8"),
      readFileSync(out, "utf8"),
      "src/schema.d.ts is stale: run `npm run generate` in clients/ts",
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
