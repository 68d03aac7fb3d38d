/* Decode one rectangle of a JPEG at 1/1, 1/2, 1/4 or 1/8 scale with libjpeg-turbo.
 *
 * Rows above the rectangle are skipped (jpeg_skip_scanlines: entropy-decoded, not transformed),
 * rows below it are never read, and only the iMCU columns that hold it go through the inverse
 * DCT, upsampling and colour conversion (jpeg_crop_scanline). For a random resized crop this is
 * about half of the work of a full decode.
 *
 * decode_region(data, scale, top, left, height, width, order) -> (pixels, rows, band, channels, offset) | None
 *   top/left/height/width are in the scaled image (libjpeg's ceil(size / scale));
 *   order: 0 RGB, 1 BGR, 2 gray;
 *   pixels: a bytearray of rows x band x channels in that order; the rectangle's first column is
 *   at `offset` inside the band (the band starts on an iMCU boundary).
 *   None: the image is not one this decoder handles the way the full decoders do (CMYK/YCCK, an
 *   EXIF orientation other than 1): decode it the ordinary way.
 *   ValueError: libjpeg's message (corrupt data).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <setjmp.h>
#include <stdio.h>
#include <string.h>

#include <jpeglib.h>

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    char message[JMSG_LENGTH_MAX];
} error_mgr;

static void on_error(j_common_ptr cinfo) {
    error_mgr *err = (error_mgr *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, err->message);
    longjmp(err->jump, 1);
}

/* warnings (corrupt data that libjpeg decodes around) are not printed, as with torchvision's decoder */
static void on_message(j_common_ptr cinfo) { (void)cinfo; }

static unsigned read16(const JOCTET *p, int little) { return little ? p[0] | (p[1] << 8) : (p[0] << 8) | p[1]; }

static unsigned long read32(const JOCTET *p, int little) {
    return little ? (unsigned long)p[0] | ((unsigned long)p[1] << 8) | ((unsigned long)p[2] << 16) |
                        ((unsigned long)p[3] << 24)
                  : ((unsigned long)p[0] << 24) | ((unsigned long)p[1] << 16) | ((unsigned long)p[2] << 8) |
                        (unsigned long)p[3];
}

/* 1 when no EXIF segment asks for a rotation, else 0: every APP1 that starts with "Exif" (whatever
 * its two padding bytes) is read, and one that cannot be read counts as a rotation, since the
 * whole-image decoders may read it differently; such images are left to them. */
static int exif_upright(j_decompress_ptr cinfo) {
    jpeg_saved_marker_ptr m;
    for (m = cinfo->marker_list; m != NULL; m = m->next) {
        const JOCTET *d = m->data;
        unsigned long n = m->data_length, ifd;
        unsigned count, k;
        int little;
        if (m->marker != JPEG_APP0 + 1 || n < 4 || memcmp(d, "Exif", 4) != 0)
            continue;
        if (n < 14)
            return 0;
        d += 6;
        n -= 6;
        if (d[0] == 'I' && d[1] == 'I')
            little = 1;
        else if (d[0] == 'M' && d[1] == 'M')
            little = 0;
        else
            return 0;
        ifd = read32(d + 4, little);
        if (ifd > n || n - ifd < 2)
            return 0;
        count = read16(d + ifd, little);
        for (k = 0; k < count; k++) {
            unsigned long e = ifd + 2 + 12UL * k;
            if (e > n || n - e < 12)
                return 0;
            if (read16(d + e, little) == 0x0112 && read16(d + e + 8, little) != 1)
                return 0;
        }
    }
    return 1;
}

static PyObject *decode_region(PyObject *self, PyObject *args) {
    Py_buffer view;
    int scale, order;
    unsigned long top, left, height, width;
    struct jpeg_decompress_struct cinfo;
    error_mgr err;
    PyObject *volatile out = NULL;
    volatile int created = 0;
    PyThreadState *volatile released = NULL;
    JDIMENSION xoff, band;
    volatile JDIMENSION rows_done = 0;
    int channels;
    unsigned long margin_x, margin_y, ext_top, ext_left, ext_right, skip_rows;
    JSAMPLE *volatile scratch = NULL;
    (void)self;

    if (!PyArg_ParseTuple(args, "y*ikkkki", &view, &scale, &top, &left, &height, &width, &order))
        return NULL;
    if ((scale != 1 && scale != 2 && scale != 4 && scale != 8) || height == 0 || width == 0 ||
        order < 0 || order > 2) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "scale must be 1, 2, 4 or 8, order 0, 1 or 2, and the rectangle not empty");
        return NULL;
    }

    cinfo.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = on_error;
    err.pub.output_message = on_message;
    err.message[0] = '\0';
    if (setjmp(err.jump)) {
        if (released != NULL)
            PyEval_RestoreThread(released);
        PyMem_Free(scratch);
        if (created)
            jpeg_destroy_decompress(&cinfo);
        Py_XDECREF(out);
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, err.message);
        return NULL;
    }
    jpeg_create_decompress(&cinfo);
    created = 1;
    jpeg_mem_src(&cinfo, (const unsigned char *)view.buf, (unsigned long)view.len);
    jpeg_save_markers(&cinfo, JPEG_APP0 + 1, 0xFFFF);
    jpeg_read_header(&cinfo, TRUE);
    if (!exif_upright(&cinfo) || cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK ||
        (cinfo.num_components != 1 && cinfo.num_components != 3)) {
        jpeg_destroy_decompress(&cinfo);
        PyBuffer_Release(&view);
        Py_RETURN_NONE;
    }
    cinfo.out_color_space = order == 2 ? JCS_GRAYSCALE : order == 1 ? JCS_EXT_BGR : JCS_RGB;
    cinfo.scale_num = 1;
    cinfo.scale_denom = (unsigned)scale;
    jpeg_start_decompress(&cinfo);
    /* compared without sums, which could wrap */
    if (top >= cinfo.output_height || height > cinfo.output_height - top || left >= cinfo.output_width ||
        width > cinfo.output_width - left) {
        char msg[200];
        snprintf(msg, sizeof msg, "rectangle %lux%lu at (%lu, %lu) outside the %ux%u image at 1/%d", height, width,
                 top, left, cinfo.output_height, cinfo.output_width, scale);
        jpeg_destroy_decompress(&cinfo);
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, msg);
        return NULL;
    }
    /* Upsampling reads the chroma samples beside a pixel; at the edge of a decoded band libjpeg
     * repeats the edge instead. So the band reaches one iMCU past the rectangle on the left and
     * right, and decoding starts one iMCU row above it (rows below are read as context anyway):
     * the rectangle's pixels are then those of the whole image. */
    margin_x = (unsigned long)cinfo.max_h_samp_factor * (unsigned long)cinfo.min_DCT_scaled_size;
    margin_y = (unsigned long)cinfo.max_v_samp_factor * (unsigned long)cinfo.min_DCT_scaled_size;
    ext_left = left > margin_x ? left - margin_x : 0;
    ext_right = cinfo.output_width - (left + width) > margin_x ? left + width + margin_x : cinfo.output_width;
    ext_top = top > margin_y ? top - margin_y : 0;
    xoff = (JDIMENSION)ext_left;
    band = (JDIMENSION)(ext_right - ext_left);
    if (xoff != 0 || band != cinfo.output_width)
        jpeg_crop_scanline(&cinfo, &xoff, &band);
    channels = cinfo.output_components;
    skip_rows = top - ext_top;
    out = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)height * band * channels);
    if (out != NULL && skip_rows > 0) {
        scratch = PyMem_Malloc((size_t)band * channels);
        if (scratch == NULL) {
            Py_CLEAR(out);
            PyErr_NoMemory();
        }
    }
    if (out == NULL) {
        jpeg_destroy_decompress(&cinfo);
        PyBuffer_Release(&view);
        return NULL;
    }
    {
        JSAMPLE *base = (JSAMPLE *)PyByteArray_AS_STRING(out);
        size_t stride = (size_t)band * channels;
        JDIMENSION got = 1;
        unsigned long context = 0;
        released = PyEval_SaveThread(); /* libjpeg's errors longjmp back above, which takes the GIL again */
        if (ext_top > 0)
            jpeg_skip_scanlines(&cinfo, (JDIMENSION)ext_top);
        while (context < skip_rows && got > 0) {
            JSAMPROW row = scratch;
            got = jpeg_read_scanlines(&cinfo, &row, 1);
            context += got;
        }
        while (rows_done < height && got > 0) {
            JSAMPROW row = base + stride * rows_done;
            got = jpeg_read_scanlines(&cinfo, &row, 1);
            rows_done += got;
        }
        PyEval_RestoreThread(released);
        released = NULL;
    }
    PyMem_Free(scratch);
    scratch = NULL;
    if (rows_done < height) {
        jpeg_destroy_decompress(&cinfo);
        Py_DECREF(out);
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "the decoder stopped before the rectangle's last row");
        return NULL;
    }
    jpeg_abort_decompress(&cinfo);
    jpeg_destroy_decompress(&cinfo);
    PyBuffer_Release(&view);
    return Py_BuildValue("(NIIiI)", out, (unsigned)height, (unsigned)band, channels, (unsigned)(left - xoff));
}

static PyMethodDef methods[] = {
    {"decode_region", decode_region, METH_VARARGS,
     "decode_region(data, scale, top, left, height, width, order) -> (pixels, rows, band, channels, offset) | None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_jpegregion", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__jpegregion(void) {
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "LIBJPEG_VERSION", JPEG_LIB_VERSION) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
