// The string form of opaque IDs against the shared vectors, which the server's code produced.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';

import { OpaqueIdError, formatOpaqueId, opaqueId, parseOpaqueId, type OpaqueErrorKind } from '../src/index.js';

interface OpaqueFile {
  valid: { text: string; key_version: number; value: string }[];
  aliases: { text: string; canonical: string; key_version: number; value: string }[];
  invalid: { text: string; kind: OpaqueErrorKind; reason: string }[];
  unencodable: { key_version: number; value: string; reason: string }[];
}

const file: OpaqueFile = JSON.parse(
  readFileSync(new URL('../../../testdata/opaque-strings.json', import.meta.url), 'utf8'),
);

test('every valid string reads and writes', () => {
  assert.ok(file.valid.length > 0);
  for (const v of file.valid) {
    const opaque = opaqueId(v.key_version, BigInt(v.value));
    assert.equal(formatOpaqueId(opaque), v.text);
    assert.deepEqual(parseOpaqueId(v.text), opaque);
  }
});

test('every alias reads as its canonical string', () => {
  assert.ok(file.aliases.length > 0);
  for (const v of file.aliases) {
    const opaque = parseOpaqueId(v.text);
    assert.deepEqual(opaque, { keyVersion: v.key_version, value: BigInt(v.value) }, v.text);
    assert.equal(formatOpaqueId(opaque), v.canonical);
  }
});

test('every invalid string is refused by the first check it fails', () => {
  assert.ok(file.invalid.length > 0);
  for (const v of file.invalid) {
    assert.throws(
      () => parseOpaqueId(v.text),
      (error: unknown) => error instanceof OpaqueIdError && error.kind === v.kind,
      `${JSON.stringify(v.text)}: ${v.reason}`,
    );
  }
});

test('every unencodable pair is refused', () => {
  assert.ok(file.unencodable.length > 0);
  for (const v of file.unencodable) {
    assert.throws(() => opaqueId(v.key_version, BigInt(v.value)), OpaqueIdError, v.reason);
    assert.throws(() => formatOpaqueId({ keyVersion: v.key_version, value: BigInt(v.value) }), OpaqueIdError, v.reason);
  }
});
