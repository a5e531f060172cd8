// Every source x store of the example (and TEAM's pairs with a team's own
// resources, <source>-<store>-team) synthesized in one process, each
// template written to <out>/<source>-<store>.json, with the context the CDK CLI gives an app (path
// and asset metadata, version reporting) and no bundling: what
// `cdk synth -c source=… -c store=…` writes, without starting the CLI and
// the app 33 times (infra/cdk-check.sh; it still runs the CLI once).
//   node --import tsx example/synth-all.ts OUT
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { App } from 'aws-cdk-lib';
import { SOURCES, STORES, TEAM, exampleStack } from './stack';

const out = process.argv[2];
if (!out) throw new Error('usage: synth-all.ts OUT');
const assemblies = fs.mkdtempSync(path.join(os.tmpdir(), 'synth-all-'));
const configurations = [
  ...SOURCES.flatMap((source) => STORES.map((store) => ({ source, store, team: false }))),
  ...TEAM.map(([source, store]) => ({ source, store, team: true })),
];
for (const { source, store, team } of configurations) {
  const name = `${source}-${store}${team ? '-team' : ''}`;
  const app = new App({
    outdir: path.join(assemblies, name),
    context: {
      source, store,
      'aws:cdk:enable-path-metadata': true,
      'aws:cdk:enable-asset-metadata': true,
      'aws:cdk:version-reporting': true,
    },
    postCliContext: { 'aws:cdk:bundling-stacks': [] },
  });
  const stack = exampleStack(app, source, store, team);
  const assembly = app.synth();
  fs.copyFileSync(assembly.getStackByName(stack.stackName).templateFullPath, path.join(out, `${name}.json`));
}
fs.rmSync(assemblies, { recursive: true, force: true });
console.log(`synth-all: ${configurations.length} templates in ${out}`);
