// The entityflow HTTP API client: openapi-fetch over the types generated
// from contracts/openapi.json (src/schema.d.ts), with the API's base URL,
// bearer credential and tenant set once.
import createClient, { type Client } from "openapi-fetch";
import type { components, paths } from "./schema.js";

export type { components, paths };

/** An RFC 9457 problem, the body of every error answer. */
export type Problem = components["schemas"]["Problem"];
/** A PointEvent as POST /v1/customers/{id}/points takes it (no dedup_key). */
export type PointEvent = components["schemas"]["PointEvent"];
/** The answer to a PointEvent. */
export type PointsResult = components["schemas"]["PointsResult"];
/** An activity definition (contracts/activity-definition.schema.json). */
export type ActivityDefinition = components["schemas"]["ActivityDefinition"];
/** An event envelope (contracts/event-envelope.schema.json). */
export type EventEnvelope = components["schemas"]["EventEnvelope"];

/** How to reach the API. */
export interface ClientOptions {
  /** The API's URL, such as http://127.0.0.1:8080. */
  baseUrl: string;
  /** The credential: an API key efk_<id>_<secret> or an OIDC JWT. */
  token?: string;
  /** Sent as X-Tenant-ID; it may only repeat the credential's tenant. */
  tenant?: string;
  /** The fetch to use (default: globalThis.fetch). */
  fetch?: typeof globalThis.fetch;
}

/** The header the API sets on a replayed answer. */
export const REPLAYED_HEADER = "Idempotent-Replayed";

/**
 * Creates a typed client of the API: every route, parameter and body of
 * contracts/openapi.json, with the credential and tenant on every request.
 * Commands take their Idempotency-Key in params.header; send the same key
 * with the same request to retry safely.
 */
export function createEntityflowClient(options: ClientOptions): Client<paths> {
  const client = createClient<paths>({ baseUrl: options.baseUrl, fetch: options.fetch });
  client.use({
    onRequest({ request }) {
      if (options.token !== undefined) {
        request.headers.set("Authorization", `Bearer ${options.token}`);
      }
      if (options.tenant !== undefined) {
        request.headers.set("X-Tenant-ID", options.tenant);
      }
      return request;
    },
  });
  return client;
}

/** Tells whether an answer is a replay of an earlier request's. */
export function isReplayed(response: Response): boolean {
  return response.headers.get(REPLAYED_HEADER) === "true";
}
