// Copies the repository's proto files (../../proto) into the package's proto/, which the
// client loads at run time and the package ships: the client always speaks the contract of
// the checkout it was built from.
import { cpSync, existsSync, rmSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const source = fileURLToPath(new URL('../../../proto', import.meta.url));
const target = fileURLToPath(new URL('../proto', import.meta.url));
if (!existsSync(source)) {
  console.error(`copy-proto: no proto directory at ${source}`);
  process.exit(1);
}
rmSync(target, { recursive: true, force: true });
cpSync(source, target, { recursive: true, filter: (path) => !path.endsWith('~') });
