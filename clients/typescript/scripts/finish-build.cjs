// The end of the build: marks dist/cjs as CommonJS (the package is ESM, "type": "module", and
// its require() entry point, built by tsconfig.cjs.json, needs a package.json saying otherwise),
// and copies the repository's LICENSE in, for the package to ship.
const { copyFileSync, writeFileSync } = require('node:fs');
writeFileSync(`${__dirname}/../dist/cjs/package.json`, '{ "type": "commonjs" }\n');
copyFileSync(`${__dirname}/../../../LICENSE`, `${__dirname}/../LICENSE`);
