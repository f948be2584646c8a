// The shared nextId() call's bounds: the latest of its callers' deadlines, or none when one of
// them has none (a quota wait none of them could use is then returned at once).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { sharedBound } from '../src/coalescer.js';

describe('a shared call', () => {
  test('has the latest deadline of its callers, or none if one has none', () => {
    assert.deepEqual(sharedBound([{ deadline: 10 }, { deadline: 90 }]), { deadline: 90 });
    assert.deepEqual(sharedBound([{ deadline: 90 }, { deadline: 10 }]), { deadline: 90 });
    assert.equal(sharedBound([{ deadline: 10 }, { deadline: undefined }]).deadline, undefined);
    assert.equal(sharedBound([{ deadline: undefined }]).deadline, undefined);
  });
});
