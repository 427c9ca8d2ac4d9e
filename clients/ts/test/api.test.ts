// The client against a running API: ENTITYFLOW_API_URL (such as
// http://127.0.0.1:8080) and ENTITYFLOW_TOKEN (an API key with every scope
// of ENTITYFLOW_TENANT, default "default"). Without them these tests are
// skipped; internal/tests/integration/api (TestTypeScriptClient) starts an
// API and runs them.
import { randomUUID } from "node:crypto";
import { describe, test } from "node:test";
import assert from "node:assert/strict";

import { createEntityflowClient, isReplayed, type ActivityDefinition, type Problem } from "../src/client.js";

const baseUrl = process.env.ENTITYFLOW_API_URL ?? "";
const token = process.env.ENTITYFLOW_TOKEN ?? "";
const tenant = process.env.ENTITYFLOW_TENANT ?? "default";
const skip = baseUrl === "" || token === "" ? "ENTITYFLOW_API_URL and ENTITYFLOW_TOKEN are not set" : false;
const problems = "https://entityflow.dev/problems/";

describe("the API through the generated client", { skip }, () => {
  const api = createEntityflowClient({ baseUrl, token, tenant });
  const customer = `ts-${randomUUID()}`;
  const key = randomUUID();

  test("points with an Idempotency-Key, then its replay", async () => {
    const send = () =>
      api.POST("/v1/customers/{id}/points", {
        params: { path: { id: customer }, header: { "Idempotency-Key": key } },
        body: { points: 25, activity: "purchase", source_id: "order-9" },
      });
    const first = await send();
    assert.equal(first.response.status, 200, JSON.stringify(first.error));
    assert.deepEqual(first.data, { applied: true, duplicate: false, points: 25, tier: "basic" });
    assert.equal(isReplayed(first.response), false);

    const again = await send();
    assert.equal(again.response.status, 200, JSON.stringify(again.error));
    assert.equal(isReplayed(again.response), true, "Idempotent-Replayed: true");
    assert.deepEqual(again.data, first.data);

    const status = await api.GET("/v1/customers/{id}", { params: { path: { id: customer } } });
    assert.equal(status.response.status, 200, JSON.stringify(status.error));
    assert.equal(status.data?.points, 25, "applied once");
  });

  test("the same key with another request is a 422 problem", async () => {
    const other = await api.POST("/v1/customers/{id}/points", {
      params: { path: { id: customer }, header: { "Idempotency-Key": key } },
      body: { points: 26 },
    });
    assert.equal(other.response.status, 422);
    assert.equal(other.response.headers.get("Content-Type"), "application/problem+json");
    const problem = other.error as Problem;
    assert.equal(problem.type, problems + "idempotency-key-reused");
    assert.equal(problem.status, 422);
  });

  test("a bad credential is a 401 with a Bearer challenge", async () => {
    const stranger = createEntityflowClient({ baseUrl, token: "efk_nobody_nothing" });
    const res = await stranger.GET("/v1/customers/{id}", { params: { path: { id: customer } } });
    assert.equal(res.response.status, 401);
    assert.match(res.response.headers.get("WWW-Authenticate") ?? "", /^Bearer /);
    assert.equal((res.error as Problem).type, problems + "unauthorized");
  });

  test("an activity definition, then an event that runs it", async () => {
    const activityId = randomUUID();
    const eventType = `ts.${randomUUID()}`;
    const definition: ActivityDefinition = {
      activity_id: activityId,
      tenant_id: tenant,
      name: "ts-client-follow-up",
      trigger: { type: "event", event: { event_types: [eventType] } },
      dedupe_key_strategy: "event_id",
      tasks: [{ task_type: "send-email", count: 1 }],
    };
    const put = await api.PUT("/v1/activities/{activity_id}", {
      params: { path: { activity_id: activityId }, header: { "Idempotency-Key": randomUUID() } },
      body: definition,
    });
    assert.equal(put.response.status, 200, JSON.stringify(put.error));
    assert.equal(put.data?.activity_id, activityId);
    assert.equal(put.data?.created, true);

    const got = await api.GET("/v1/activities/{activity_id}", { params: { path: { activity_id: activityId } } });
    assert.equal(got.response.status, 200, JSON.stringify(got.error));
    assert.equal(got.data?.name, definition.name);

    const eventId = `evt_${randomUUID()}`;
    const event = await api.POST("/v1/events", {
      body: { event_id: eventId, event_type: eventType, source: "ts-client", tenant_id: tenant, occurred_at: new Date().toISOString(), payload: { order: 9 } },
    });
    assert.equal(event.response.status, 202, JSON.stringify(event.error));
    assert.equal(event.data?.event_id, eventId);
    assert.equal(event.data?.runs.length, 1);
    assert.equal(event.data?.runs[0].activity_id, activityId);
    assert.equal(event.data?.runs[0].duplicate, false);
  });
});
