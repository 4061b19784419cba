// wgsl_reflect's "main" is a CommonJS build inside a "type": "module" package, which Node cannot
// load; we import its ES module file directly and give it the package's own types.
declare module 'wgsl_reflect/wgsl_reflect.module.js' {
  export * from 'wgsl_reflect';
}
