// Validates glTF/GLB files with the Khronos glTF-Validator (npm package "gltf-validator").
// Usage: node validate_gltf.js FILE...   (the package is found through NODE_PATH or a global install)
// Prints one JSON object {file: {numErrors, numWarnings, messages: [{code, severity, message, pointer}]}}
// and exits with 1 if any file has errors, 2 if the validator could not run.
"use strict";
const fs = require("fs");

let validator;
try {
  validator = require("gltf-validator");
} catch (error) {
  console.error("gltf-validator not found: npm install gltf-validator, then set NODE_PATH to its node_modules");
  process.exit(2);
}

async function main(files) {
  const reports = {};
  let failed = false;
  for (const file of files) {
    const report = await validator.validateBytes(new Uint8Array(fs.readFileSync(file)), { maxIssues: 100 });
    const issues = report.issues;
    reports[file] = {
      numErrors: issues.numErrors,
      numWarnings: issues.numWarnings,
      messages: issues.messages.map((m) => ({
        code: m.code, severity: m.severity, message: m.message, pointer: m.pointer,
      })),
    };
    failed = failed || issues.numErrors > 0;
  }
  console.log(JSON.stringify(reports));
  process.exit(failed ? 1 : 0);
}

main(process.argv.slice(2)).catch((error) => {
  console.error(String(error));
  process.exit(2);
});
