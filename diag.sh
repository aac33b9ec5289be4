ext=$(ls build/python-site/conv3djit/_ext*.so)
tl=/opt/torch/.venv/lib/python3.12/site-packages/torch/lib
echo "exported by ext: $(nm -D --defined-only $ext | wc -l), unique: $(nm -D --defined-only $ext | grep -c ' u ')"
nm -D --defined-only $ext | grep ' u ' | awk '{print $3}' | sort -u > /tmp/ext_u
nm -D --defined-only $ext | awk '{print $3}' | sort -u > /tmp/ext_all
for l in $tl/libtorch_cpu.so $tl/libtorch_cuda.so $tl/libc10.so $tl/libc10_cuda.so $tl/libtorch_python.so; do
  nm -D --defined-only $l | awk '{print $3}' | sort -u > /tmp/t_all
  echo "== $(basename $l): shared with ext: $(comm -12 /tmp/ext_all /tmp/t_all | wc -l)"
  comm -12 /tmp/ext_all /tmp/t_all | head -8 | c++filt
done
echo "== ext unique symbols"; head -20 /tmp/ext_u | c++filt
