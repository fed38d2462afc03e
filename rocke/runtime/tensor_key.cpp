// rocke's native tensor key: what the call cache keys a call's tensors by (class, address,
// dims, dtype, device, sizes, strides), read from each tensor's TensorImpl in one pass instead
// of six Python getter calls per tensor. Built by `python -m rocke.runtime.tensor_key --build`
// (scripts/setup.sh); rocke/runtime/tensor_key.py loads it, and reads the same facts in Python
// when it is not built. Returns (hash, bytes): the bytes are the key, the hash (FNV-1a over
// them) its cheap first look-up; None when a tensor cannot be keyed (the caller validates it).
#include <Python.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstdint>
#include <exception>

namespace {

constexpr int64_t kMaxTensors = 16;
constexpr int64_t kMaxDims = 8;
constexpr int64_t kWordsPerTensor = 3 + 2 * kMaxDims;

PyObject* tensors_key(PyObject*, PyObject* tensors) {
  if (!PyTuple_CheckExact(tensors)) {
    PyErr_SetString(PyExc_TypeError, "tensors_key: expects a tuple of tensors");
    return nullptr;
  }
  const Py_ssize_t n = PyTuple_GET_SIZE(tensors);
  if (n > kMaxTensors) Py_RETURN_NONE;
  int64_t words[kMaxTensors * kWordsPerTensor];
  int64_t* w = words;
  try {
    for (Py_ssize_t i = 0; i < n; ++i) {
      PyObject* obj = PyTuple_GET_ITEM(tensors, i);
      if (!THPVariable_Check(obj)) Py_RETURN_NONE;
      const at::Tensor& t = THPVariable_Unpack(obj);
      if (!t.defined() || t.layout() != at::kStrided ||
          t.unsafeGetTensorImpl()->has_symbolic_sizes_strides())
        Py_RETURN_NONE;
      const int64_t dim = t.dim();
      if (dim > kMaxDims) Py_RETURN_NONE;
      // the class (the Python side keeps every keyed class alive: its address is never reused)
      *w++ = reinterpret_cast<int64_t>(Py_TYPE(obj));
      *w++ = reinterpret_cast<int64_t>(t.has_storage() ? t.const_data_ptr() : nullptr);
      *w++ = (dim << 32) | (static_cast<int64_t>(t.scalar_type()) << 16) |
             (static_cast<int64_t>(t.device().type()) << 8) |
             static_cast<int64_t>(static_cast<uint8_t>(t.device().index()));
      const auto sizes = t.sizes();
      const auto strides = t.strides();
      for (int64_t d = 0; d < dim; ++d) *w++ = sizes[d];
      for (int64_t d = 0; d < dim; ++d) *w++ = strides[d];
    }
  } catch (const std::exception&) {   // c10::Error (a tensor without data, ...): not keyed
    Py_RETURN_NONE;
  }
  uint64_t hash = 1469598103934665603ULL;
  for (const int64_t* p = words; p < w; ++p) {
    hash ^= static_cast<uint64_t>(*p);
    hash *= 1099511628211ULL;
  }
  PyObject* key = PyBytes_FromStringAndSize(reinterpret_cast<const char*>(words),
                                            (w - words) * static_cast<Py_ssize_t>(sizeof(int64_t)));
  if (key == nullptr) return nullptr;
  PyObject* first = PyLong_FromUnsignedLongLong(hash);
  if (first == nullptr) {
    Py_DECREF(key);
    return nullptr;
  }
  PyObject* pair = PyTuple_Pack(2, first, key);
  Py_DECREF(first);
  Py_DECREF(key);
  return pair;
}

PyMethodDef methods[] = {
    {"tensors_key", tensors_key, METH_O,
     "tensors_key(tensors: tuple) -> (hash, bytes) | None: the tensors' class, address, dims, "
     "dtype, device, sizes and strides"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "rocke_tensor_key", nullptr, -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit_rocke_tensor_key() { return PyModule_Create(&module); }
