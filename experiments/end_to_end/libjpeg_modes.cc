// libjpeg(-turbo) decode speed of JPEG streams under its four speed settings: dct_method
// ISLOW (default) or IFAST, fancy (triangle) chroma upsampling on (default) or off; one
// thread, 3 passes, modes interleaved (issue 15: "libjpeg-turbo's fastest settings").
// STREAMS.bin: int64 n, int64 offsets[n + 1], then the streams back to back, e.g. the first
// 400 images of an Imagenette JPEG shard (h5py: /offsets, /images).
//   g++ -O2 -o libjpeg_modes libjpeg_modes.cc -ljpeg && ./libjpeg_modes STREAMS.bin
#include <cstdio>
#include <cstdint>
#include <vector>
#include <chrono>
#include <jpeglib.h>
int main(int argc,char**argv){if(argc<2){fprintf(stderr,"usage: libjpeg_modes STREAMS.bin\n");return 2;}FILE*f=fopen(argv[1],"rb");if(!f){perror(argv[1]);return 1;}int64_t n;fread(&n,8,1,f);std::vector<int64_t> off(n+1);fread(off.data(),8,n+1,f);std::vector<unsigned char> d(off[n]);fread(d.data(),1,d.size(),f);
 for(int mi=0;mi<8;mi++){int mode=(7-mi)%4;{ auto t0=std::chrono::steady_clock::now(); std::vector<unsigned char> px(224*224*3); long sum=0;
 for(int rep=0;rep<3;rep++) for(int i=0;i<n;i++){ jpeg_decompress_struct c; jpeg_error_mgr e; c.err=jpeg_std_error(&e); jpeg_create_decompress(&c); jpeg_mem_src(&c,d.data()+off[i],off[i+1]-off[i]); jpeg_read_header(&c,TRUE); c.out_color_space=JCS_RGB;
  if(mode&1) c.dct_method=JDCT_IFAST; if(mode&2) c.do_fancy_upsampling=FALSE;
  jpeg_start_decompress(&c); while(c.output_scanline<c.output_height){unsigned char* r=px.data()+c.output_scanline*c.output_width*3; jpeg_read_scanlines(&c,&r,1);} jpeg_finish_decompress(&c); jpeg_destroy_decompress(&c); sum+=px[1000];}
 double s=std::chrono::duration<double>(std::chrono::steady_clock::now()-t0).count(); printf("mode ifast=%d nofancy=%d: %.0f img/s (1 thread) %ld\n",mode&1,(mode&2)>>1,3*n/s,sum);}}
}
