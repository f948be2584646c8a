/**
 * The IdService methods, loaded at run time from the proto shipped in the package (copied from
 * the repository's proto/ at build time).
 */
import type { MethodDefinition } from '@grpc/grpc-js';
import { loadSync } from '@grpc/proto-loader';
import { fileURLToPath } from 'node:url';

/** fixed64 fields arrive as decimal strings (`longs: String`), never as a lossy `number`. */
export interface NextIdResponse {
  id: string;
}
export interface BatchIdsRequest {
  count: number;
}
export interface BatchIdsResponse {
  ids: string[];
}
type Empty = Record<string, never>;

export interface IdServiceMethods {
  NextId: MethodDefinition<Empty, NextIdResponse>;
  BatchIds: MethodDefinition<BatchIdsRequest, BatchIdsResponse>;
}

const PROTO = fileURLToPath(new URL('../../proto/snowmint/v1/snowmint.proto', import.meta.url));

/** The service's method definitions (paths, serializers), loaded once. */
export const idService: IdServiceMethods = (() => {
  const definition = loadSync(PROTO, { longs: String, defaults: true });
  return definition['snowmint.v1.IdService'] as unknown as IdServiceMethods;
})();
