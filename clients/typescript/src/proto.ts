/**
 * The IdService methods, loaded at run time from the proto shipped in the package (copied from
 * the repository's proto/ at build time).
 */
import type { MethodDefinition } from '@grpc/grpc-js';
import { loadSync } from '@grpc/proto-loader';
import { fileURLToPath } from 'node:url';

/**
 * A fixed64 as protobuf.js decodes it (with the `long` package, which proto-loader depends
 * on): two 32-bit halves, each exact as a JS number.
 */
export interface Fixed64 {
  high: number;
  low: number;
}

export interface NextIdResponse {
  id: Fixed64;
}
export interface BatchIdsRequest {
  count: number;
}
export interface BatchIdsResponse {
  ids: Fixed64[];
}
type Empty = Record<string, never>;

export interface IdServiceMethods {
  NextId: MethodDefinition<Empty, NextIdResponse>;
  BatchIds: MethodDefinition<BatchIdsRequest, BatchIdsResponse>;
}

const PROTO = fileURLToPath(new URL('../../proto/snowmint/v1/snowmint.proto', import.meta.url));

/**
 * The service's method definitions (paths, serializers), loaded once. fixed64 fields are left
 * as protobuf.js's 64-bit objects (no `longs` option): turning them into decimal strings
 * (`longs: String`) and parsing those cost about 600 ns an ID, most of a buffered
 * `nextId()`; the halves cost a tenth of that.
 */
export const idService: IdServiceMethods = (() => {
  const definition = loadSync(PROTO, { defaults: true });
  return definition['snowmint.v1.IdService'] as unknown as IdServiceMethods;
})();

/**
 * A decoded fixed64 as a `bigint`, from its two halves, so the 64-bit value never passes
 * through one lossy JS number.
 * @throws TypeError when protobuf.js decoded it as a plain number, which happens only without
 *   the `long` package, and may have lost the ID's low bits
 */
export function toBigInt(value: Fixed64): bigint {
  if (typeof value !== 'object' || value === null) {
    throw new TypeError(`a fixed64 arrived as ${typeof value}, not a 64-bit object: is the long package installed?`);
  }
  return (BigInt(value.high >>> 0) << 32n) | BigInt(value.low >>> 0);
}
